#include "engine/ops/cpu/rms_norm.h"

#include <cmath>
#include <vector>

namespace vismoe::cpu {

void RmsNorm(ThreadPool* pool, const float* x, int64_t n, int64_t dim, const TensorView& weight,
             float eps, float* y) {
  std::vector<float> w(dim);
  ToFloat(weight.dtype, weight.data, dim, w.data());
  ParallelFor(pool, n, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      // Accumulate in double: closest to torch's blocked fp32 reduction.
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
      const float variance = static_cast<float>(ss / static_cast<double>(dim));
      const float inv = 1.0f / std::sqrt(variance + eps);
      for (int64_t i = 0; i < dim; ++i) yr[i] = w[i] * (xr[i] * inv);
    }
  });
}

}  // namespace vismoe::cpu
