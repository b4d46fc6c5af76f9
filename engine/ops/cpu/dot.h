// The fp32 dot product every CPU reference kernel shares, and the portable
// y += alpha * x the attention's weighted sum of values uses.
#ifndef VISMOE_ENGINE_OPS_CPU_DOT_H_
#define VISMOE_ENGINE_OPS_CPU_DOT_H_

#include <cstdint>

namespace vismoe::cpu {

// Four partial sums let the compiler vectorise without -ffast-math; the
// summation order is fixed, so results are reproducible run to run.
inline float Dot(const float* a, const float* b, int64_t n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

// y[t] += alpha * x[t] for t < n (two roundings per element).
inline void Axpy(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t t = 0; t < n; ++t) y[t] += alpha * x[t];
}

}  // namespace vismoe::cpu

#endif  // VISMOE_ENGINE_OPS_CPU_DOT_H_
