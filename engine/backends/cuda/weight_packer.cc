#include "engine/backends/cuda/weight_packer.h"

#include <algorithm>
#include <cstring>

#include "engine/core/dtype.h"
#include "engine/ops/cpu/linear.h"

namespace vismoe::cuda {
namespace {

size_t Aligned(size_t bytes) {
  return (bytes + WeightPacker::kAlign - 1) / WeightPacker::kAlign * WeightPacker::kAlign;
}

}  // namespace

size_t WeightPacker::Add(const TensorView& t) { return AddStacked({&t}); }

size_t WeightPacker::AddStacked(std::initializer_list<const TensorView*> tensors) {
  const size_t offset = Aligned(host_.size() * sizeof(Bf16));
  size_t at = offset / sizeof(Bf16);
  for (const TensorView* t : tensors) {
    host_.resize(at + static_cast<size_t>(t->numel()));
    Bf16* dst = host_.data() + at;
    if (t->dtype == DType::kBF16) {
      std::copy_n(static_cast<const Bf16*>(t->data), t->numel(), dst);
    } else if (t->dtype == DType::kF8E4M3) {  // an FP8 checkpoint's linear weights
      const std::vector<float> f = cpu::DequantizeF8(*t);
      for (size_t i = 0; i < f.size(); ++i) dst[i] = FloatToBf16(f[i]);
    } else {
      std::vector<float> f(static_cast<size_t>(t->numel()));
      ToFloat(t->dtype, t->data, f.size(), f.data());
      for (size_t i = 0; i < f.size(); ++i) dst[i] = FloatToBf16(f[i]);
    }
    at += static_cast<size_t>(t->numel());
  }
  return offset;
}

size_t WeightPacker::AddF32(const std::vector<float>& v) {
  const size_t offset = Aligned(host_.size() * sizeof(Bf16));
  host_.resize(offset / sizeof(Bf16) + v.size() * 2);
  std::memcpy(host_.data() + offset / sizeof(Bf16), v.data(), v.size() * sizeof(float));
  return offset;
}

}  // namespace vismoe::cuda
