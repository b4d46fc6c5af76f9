// TensorView: a non-owning, typed view of a dense row-major tensor.
// Weights are views into the mmapped checkpoint (or into the offload arena);
// whoever hands out a view guarantees the memory outlives its use.
#ifndef VISMOE_ENGINE_CORE_TENSOR_H_
#define VISMOE_ENGINE_CORE_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/dtype.h"

namespace vismoe {

using Shape = std::vector<int64_t>;

// The dequantisation scales of a block-quantised weight [.., out, in]:
// scale [.., ceil(out / rows), ceil(in / cols)] block by block,
// w[o, i] = q[o, i] * scale[o / rows, i / cols]. F8_E4M3 weights as
// fine-grained FP8 checkpoints store them (`<name>_scale_inv`, F32 or BF16);
// MXFP4 weights with F8_E8M0 scales, rows 1 and cols 32.
struct BlockScale {
  const void* data = nullptr;  // F32, BF16 or F8_E8M0
  DType dtype = DType::kF32;
  int64_t rows = 0;  // block size along the output dimension
  int64_t cols = 0;  // ... and along the input dimension
  bool operator==(const BlockScale&) const = default;
  // The same dtype and block size (the data may differ).
  bool SameBlocks(const BlockScale& o) const {
    return dtype == o.dtype && rows == o.rows && cols == o.cols;
  }
};

// The block size of a block-quantised checkpoint (weight_block_size).
struct QuantBlock {
  int64_t rows = 128;
  int64_t cols = 128;
  bool operator==(const QuantBlock&) const = default;
};

// Number of blocks of `block` covering `n`.
inline int64_t CeilDiv(int64_t n, int64_t block) { return (n + block - 1) / block; }

struct TensorView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;
  // Set exactly when dtype is kF8E4M3 or kMxFp4 (the value of an element is
  // its e4m3 / e2m1 value times its block's scale). REQUIRES then: rank() >= 2.
  BlockScale scale;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  size_t nbytes() const { return DTypeBytes(dtype, numel()); }
  int rank() const { return static_cast<int>(shape.size()); }
  int64_t dim(int i) const { return shape[i < 0 ? shape.size() + i : i]; }
  bool empty() const { return data == nullptr; }

  // Number of scale values of a block-quantised view (0 otherwise).
  int64_t scale_numel() const {
    if (scale.data == nullptr) return 0;
    int64_t n = CeilDiv(dim(-2), scale.rows) * CeilDiv(dim(-1), scale.cols);
    for (int i = 0; i + 2 < rank(); ++i) n *= shape[i];
    return n;
  }
  size_t scale_nbytes() const { return DTypeBytes(scale.dtype, scale_numel()); }

  // Row `i` of the outermost dimension (a view of rank-1 lower).
  // REQUIRES: rank() >= 1 and 0 <= i < shape[0]; rank() >= 3 when scaled.
  TensorView Row(int64_t i) const {
    TensorView r{nullptr, dtype, Shape(shape.begin() + 1, shape.end()), scale};
    r.data = static_cast<const char*>(data) + static_cast<size_t>(i) * r.nbytes();
    if (scale.data != nullptr) {
      r.scale.data =
          static_cast<const char*>(scale.data) + static_cast<size_t>(i) * r.scale_nbytes();
    }
    return r;
  }

  // StrCat, not operator+: GCC 12 -O3 reports a false -Wrestrict on "[" + str.
  std::string ShapeString() const { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CORE_TENSOR_H_
