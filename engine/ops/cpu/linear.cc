#include "engine/ops/cpu/linear.h"

#include <algorithm>
#include <vector>

#include "engine/ops/cpu/dot.h"

namespace vismoe::cpu {

void Linear(ThreadPool* pool, const float* x, int64_t n, int64_t in, const TensorView& w,
            const TensorView* bias, float* y) {
  const int64_t out = w.dim(0);
  std::vector<float> b;
  if (bias != nullptr) {
    b.resize(out);
    ToFloat(bias->dtype, bias->data, out, b.data());
  }
  const size_t row_bytes = static_cast<size_t>(in) * DTypeSize(w.dtype);
  ParallelFor(pool, out, 16, [&](int64_t o0, int64_t o1) {
    std::vector<float> wrow(in);
    for (int64_t o = o0; o < o1; ++o) {
      ToFloat(w.dtype, static_cast<const char*>(w.data) + o * row_bytes, in, wrow.data());
      const float bo = b.empty() ? 0.0f : b[o];
      for (int64_t t = 0; t < n; ++t) y[t * out + o] = Dot(x + t * in, wrow.data(), in) + bo;
    }
  });
}

void LinearTransposed(ThreadPool* pool, const float* x, int64_t n, int64_t in,
                      const TensorView& w_t, float* y) {
  const int64_t out = w_t.dim(1);
  // Widen the weight once into [out, in] order, then reuse the row kernel.
  std::vector<float> w(static_cast<size_t>(out) * in);
  const size_t esz = DTypeSize(w_t.dtype);
  ParallelFor(pool, in, 64, [&](int64_t i0, int64_t i1) {
    std::vector<float> row(out);
    for (int64_t i = i0; i < i1; ++i) {
      ToFloat(w_t.dtype, static_cast<const char*>(w_t.data) + i * out * esz, out, row.data());
      for (int64_t o = 0; o < out; ++o) w[o * in + i] = row[o];
    }
  });
  TensorView wv{w.data(), DType::kF32, {out, in}};
  Linear(pool, x, n, in, wv, nullptr, y);
}

}  // namespace vismoe::cpu
