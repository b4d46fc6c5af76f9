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
#include "engine/ops/cpu/matmul_kernels.h"

#define VISMOE_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace vismoe::cpu::internal {

// Bytes of one weight of dtype D.
template <DType D>
constexpr size_t kSize = D == DType::kF32 ? 4 : (D == DType::kF8E4M3 ? 1 : 2);

// Eight e4m3 bytes (zero-extended to 16 bits) as the fp16 bit patterns of
// their values / 256: the sign moves to bit 15, exponent and mantissa to bits
// 13..7 (fp16's exponent bias 15 is e4m3's 7 plus 8, subnormals included), so
// the conversion is exact; the NaN codes (low seven bits all set) get an
// all-ones exponent, staying NaN.
VISMOE_AVX2 inline __m128i E4m3ToHalfBits(__m128i bytes16) {
  const __m128i low7 = _mm_and_si128(bytes16, _mm_set1_epi16(0x7f));
  const __m128i sign = _mm_slli_epi16(_mm_and_si128(bytes16, _mm_set1_epi16(0x80)), 8);
  const __m128i nan =
      _mm_and_si128(_mm_cmpeq_epi16(low7, _mm_set1_epi16(0x7f)), _mm_set1_epi16(0x7e00));
  return _mm_or_si128(_mm_or_si128(sign, _mm_slli_epi16(low7, 7)), nan);
}

// Eight e4m3 weights at element i of p times `mul` = 256 * their block's
// scale: (value / 256) * (256 * scale) is value * scale rounded once, the
// dequantised weight.
VISMOE_AVX2 inline __m256 Load8E4m3(const void* p, int64_t i, __m256 mul) {
  const __m128i b =
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(p) + i));
  return _mm256_mul_ps(_mm256_cvtph_ps(E4m3ToHalfBits(_mm_cvtepu8_epi16(b))), mul);
}

// Eight weights of dtype D starting at element i of p, widened exactly
// (BF16: zero-extend and shift; F16: vcvtph2ps).
template <DType D>
VISMOE_AVX2 inline __m256 Load8(const void* p, int64_t i) {
  static_assert(D != DType::kF8E4M3, "e4m3 weights need their scale: Load8E4m3");
  if constexpr (D == DType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  } else {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
    if constexpr (D == DType::kF16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

// Load8 for every dtype, Load8E4m3 (with `mul`) for e4m3; `mul` is unused
// for the others.
template <DType D>
VISMOE_AVX2 inline __m256 LoadW8(const void* p, int64_t i, __m256 mul) {
  if constexpr (D == DType::kF8E4M3) {
    return Load8E4m3(p, i, mul);
  } else {
    return Load8<D>(p, i);
  }
}

// mul[j] = 256 * the scale of weight (o + j, i), broadcast, for j < NB: the
// `mul` of Load8E4m3 for NB weight rows from column i on.
template <int NB>
VISMOE_AVX2 inline void SetE4m3Muls(const MatMulArgs& a, int64_t o, int64_t i, __m256* mul) {
#pragma GCC unroll 16
  for (int j = 0; j < NB; ++j) mul[j] = _mm256_set1_ps(256.0f * a.ScaleAt(o + j, i));
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
