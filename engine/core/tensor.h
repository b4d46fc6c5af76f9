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

struct TensorView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
  int rank() const { return static_cast<int>(shape.size()); }
  int64_t dim(int i) const { return shape[i < 0 ? shape.size() + i : i]; }
  bool empty() const { return data == nullptr; }

  // Row `i` of the outermost dimension (a view of rank-1 lower).
  // REQUIRES: rank() >= 1 and 0 <= i < shape[0].
  TensorView Row(int64_t i) const {
    TensorView r{nullptr, dtype, Shape(shape.begin() + 1, shape.end())};
    r.data = static_cast<const char*>(data) + static_cast<size_t>(i) * r.nbytes();
    return r;
  }

  // StrCat, not operator+: GCC 12 -O3 reports a false -Wrestrict on "[" + str.
  std::string ShapeString() const { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CORE_TENSOR_H_
