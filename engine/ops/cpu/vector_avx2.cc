// The AVX2 + FMA vector primitives of vector_kernels.h (target attributes per
// function, like matmul_avx2.cc; called only after DetectedKernelPath() saw
// the features).
#include <cmath>

#include "engine/ops/cpu/dot.h"
#include "engine/ops/cpu/vector_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define VISMOE_AVX2 __attribute__((target("avx2,fma")))

namespace vismoe::cpu::internal {

VISMOE_AVX2 float DotAvx2(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  if (i + 8 <= n) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    i += 8;
  }
  const __m256 v = _mm256_add_ps(acc0, acc1);
  // ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), as matmul_kernels.h.
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  float sum = _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
  for (; i < n; ++i) sum = std::fma(a[i], b[i], sum);
  return sum;
}

VISMOE_AVX2 void AxpyAvx2(float alpha, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(alpha);
  int64_t t = 0;
  for (; t + 8 <= n; t += 8) {
    _mm256_storeu_ps(y + t, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + t), _mm256_loadu_ps(y + t)));
  }
  for (; t < n; ++t) y[t] = std::fma(alpha, x[t], y[t]);
}

}  // namespace vismoe::cpu::internal

#else  // not x86: DetectedKernelPath() never picks kAvx2.

namespace vismoe::cpu::internal {
float DotAvx2(const float* a, const float* b, int64_t n) { return Dot(a, b, n); }
void AxpyAvx2(float alpha, const float* x, float* y, int64_t n) { Axpy(alpha, x, y, n); }
}  // namespace vismoe::cpu::internal

#endif
