#include "engine/ops/cpu/layer_norm.h"

#include <cmath>
#include <vector>

#include "engine/core/dtype.h"

namespace vismoe::cpu {
namespace {

std::vector<float> Widen(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  ToFloat(t.dtype, t.data, out.size(), out.data());
  return out;
}

}  // namespace

void LayerNorm(ThreadPool* pool, const float* x, int64_t n, int64_t dim, const TensorView& weight,
               const TensorView& bias, float eps, float* y) {
  const std::vector<float> w = Widen(weight);
  const std::vector<float> b = Widen(bias);
  ParallelFor(pool, n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      // Double accumulation keeps the statistics exact to fp32 rounding.
      double sum = 0.0;
      for (int64_t i = 0; i < dim; ++i) sum += xr[i];
      const double mean = sum / static_cast<double>(dim);
      double sq = 0.0;
      for (int64_t i = 0; i < dim; ++i) {
        const double d = xr[i] - mean;
        sq += d * d;
      }
      const float rstd = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(dim) + eps));
      const float m = static_cast<float>(mean);
      for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] - m) * rstd * w[i] + b[i];
    }
  });
}

}  // namespace vismoe::cpu
