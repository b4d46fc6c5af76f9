// Internal to engine/ops/cpu: the AVX2 helpers that matmul_avx2.cc and
// matmul_avx512.cc share (an AVX-512 function may inline an AVX2 one: its
// target is a superset). One definition keeps the eight-lane reduction order
// of matmul_kernels.h the same on both paths. Include only from files whose
// kernels are reached after DetectedKernelPath() said the CPU has AVX2.
// Thread safety: pure functions.
#ifndef VISMOE_ENGINE_OPS_CPU_AVX2_HELPERS_H_
#define VISMOE_ENGINE_OPS_CPU_AVX2_HELPERS_H_

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "engine/core/dtype.h"

#define VISMOE_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace vismoe::cpu::internal {

// Bytes of one weight of dtype D.
template <DType D>
constexpr size_t kSize = D == DType::kF32 ? 4 : 2;

// Eight weights of dtype D starting at element i of p, widened exactly
// (BF16: zero-extend and shift; F16: vcvtph2ps).
template <DType D>
VISMOE_AVX2 inline __m256 Load8(const void* p, int64_t i) {
  if constexpr (D == DType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  } else {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
    if constexpr (D == DType::kF16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), the order matmul_kernels.h fixes.
VISMOE_AVX2 inline float Hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));  // (s0+s2), (s1+s3)
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

}  // namespace vismoe::cpu::internal

#endif  // x86
#endif  // VISMOE_ENGINE_OPS_CPU_AVX2_HELPERS_H_
