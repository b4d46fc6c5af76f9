#include "engine/backends/cuda/weight_packer.h"

#include <algorithm>
#include <cstring>

#include "engine/core/dtype.h"

namespace vismoe::cuda {
namespace {

size_t Aligned(size_t bytes) {
  return (bytes + WeightPacker::kAlign - 1) / WeightPacker::kAlign * WeightPacker::kAlign;
}

}  // namespace

size_t WeightPacker::Add(const TensorView& t) {
  const size_t offset = Aligned(host_.size() * sizeof(Bf16));
  host_.resize(offset / sizeof(Bf16) + static_cast<size_t>(t.numel()));
  Bf16* dst = host_.data() + offset / sizeof(Bf16);
  if (t.dtype == DType::kBF16) {
    std::copy_n(static_cast<const Bf16*>(t.data), t.numel(), dst);
  } else {
    std::vector<float> f(static_cast<size_t>(t.numel()));
    ToFloat(t.dtype, t.data, f.size(), f.data());
    for (size_t i = 0; i < f.size(); ++i) dst[i] = FloatToBf16(f[i]);
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
