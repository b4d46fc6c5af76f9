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

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/ops/cpu/matmul_kernels.h"

#define VISMOE_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace vismoe::cpu::internal {

// Bytes of one weight of dtype D (cols kernels: F32, F16, BF16 only).
template <DType D>
constexpr size_t kSize = D == DType::kF32 ? 4 : (D == DType::kF8E4M3 ? 1 : 2);
// Bytes of n weights of dtype D (MXFP4: n even).
template <DType D>
constexpr size_t Bytes(int64_t n) {
  constexpr size_t kBits = D == DType::kMxFp4 ? 4 : 8 * kSize<D>;
  return static_cast<size_t>(n) * kBits / 8;
}
// Block-scaled dtypes. Their loads take a `mul` per block: for e4m3 256 *
// the scale (Load8E4m3 yields value / 256); for MXFP4 the eight e2m1
// magnitudes times the scale (Load8Mxfp4 looks the weights up in it).
template <DType D>
constexpr bool kScaled = D == DType::kF8E4M3 || D == DType::kMxFp4;

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

// The eight e2m1 magnitudes (codes 0-7).
VISMOE_AVX2 inline __m256 E2m1Magnitudes() {
  return _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
}

// Eight MXFP4 weights at element i of p (i even: four bytes, the even element
// in each low nibble), looked up in `scaled` = E2m1Magnitudes() * their
// block's scale, the sign bit moved to bit 31. Exact: an e2m1 value times a
// power of two, whichever is multiplied first.
VISMOE_AVX2 inline __m256 Load8Mxfp4(const void* p, int64_t i, __m256 scaled) {
  int32_t four;
  std::memcpy(&four, static_cast<const uint8_t*>(p) + i / 2, sizeof(four));
  // Each byte doubled (b0 b0 b1 b1 ...) and widened to a lane; the odd lanes
  // shifted by four: each lane's low four bits are its nibble.
  const __m128i b = _mm_cvtsi32_si128(four);
  const __m256i codes = _mm256_srlv_epi32(_mm256_cvtepu8_epi32(_mm_unpacklo_epi8(b, b)),
                                          _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));
  // vpermps reads each code's low three bits; bit 3 of each nibble is the sign.
  const __m256 magnitude = _mm256_permutevar8x32_ps(scaled, codes);
  const __m256 sign =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(codes, _mm256_set1_epi32(8)), 28));
  return _mm256_xor_ps(magnitude, sign);
}

// Eight weights of dtype D starting at element i of p, widened exactly
// (BF16: zero-extend and shift; F16: vcvtph2ps).
template <DType D>
VISMOE_AVX2 inline __m256 Load8(const void* p, int64_t i) {
  static_assert(!kScaled<D>, "block-scaled weights need their scale: LoadW8");
  if constexpr (D == DType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  } else {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
    if constexpr (D == DType::kF16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

// Load8 for every dtype, Load8E4m3 / Load8Mxfp4 (with `mul`) for the
// block-scaled ones; `mul` is unused for the others.
template <DType D>
VISMOE_AVX2 inline __m256 LoadW8(const void* p, int64_t i, __m256 mul) {
  if constexpr (D == DType::kF8E4M3) {
    return Load8E4m3(p, i, mul);
  } else if constexpr (D == DType::kMxFp4) {
    return Load8Mxfp4(p, i, mul);
  } else {
    return Load8<D>(p, i);
  }
}

// srow[j] = the scales of weight row o + j (MatMulArgs::ScaleRow), j < NB;
// nothing for unscaled dtypes.
template <DType D, int NB>
VISMOE_AVX2 inline void SetScaleRows(const MatMulArgs& a, int64_t o, const void** srow) {
  if constexpr (kScaled<D>) {
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) srow[j] = a.ScaleRow(o + j);
  }
}

// The `mul` of LoadW8 for a block whose scale is `scale`.
template <DType D>
VISMOE_AVX2 inline __m256 ScaleMul(float scale) {
  if constexpr (D == DType::kMxFp4) return _mm256_mul_ps(E2m1Magnitudes(), _mm256_set1_ps(scale));
  return _mm256_set1_ps(256.0f * scale);
}

// mul[j] = ScaleMul of column block `block` of row srow[j], for j < NB: the
// `mul` of LoadW8 for NB weight rows in that block.
template <DType D, int NB>
VISMOE_AVX2 inline void SetScaleMuls(const void* const* srow, int64_t block, __m256* mul) {
#pragma GCC unroll 16
  for (int j = 0; j < NB; ++j) mul[j] = ScaleMul<D>(ScaleIn<D>(srow[j], block));
}

// Weight rows [o0, o1) of a block-scaled dtype D widened to fp32 into dst
// [o1 - o0, in], each weight the value LoadW8 gives it (a tail shorter than
// eight zero-padded as the kernels pad it): a kernel over dst does, bit for
// bit, what it does over the weights, without widening them again for every
// few rows of x (prefill).
template <DType D>
VISMOE_AVX2 inline void WidenRows(const MatMulArgs& a, int64_t o0, int64_t o1, float* dst) {
  static_assert(kScaled<D>, "only block-scaled weights need widening");
  const int64_t in = a.in, full = in & ~int64_t{7};
  for (int64_t o = o0; o < o1; ++o) {
    const char* w = static_cast<const char*>(a.w) + Bytes<D>(o * in);
    float* d = dst + (o - o0) * in;
    const void* srow = a.ScaleRow(o);
    __m256 mul = _mm256_setzero_ps();
    int64_t next_block = 0, block = 0;
    for (int64_t i = 0; i < full; i += 8) {
      if (i == next_block) {
        mul = ScaleMul<D>(ScaleIn<D>(srow, block++));
        next_block += a.scale_cols;
      }
      _mm256_storeu_ps(d + i, LoadW8<D>(w, i, mul));
    }
    if (full < in) {  // e4m3 only (MXFP4 rows are whole blocks of 32)
      alignas(32) uint8_t tail[32] = {};
      alignas(32) float out[8];
      std::memcpy(tail, w + Bytes<D>(full), Bytes<D>(in - full));
      _mm256_store_ps(out, LoadW8<D>(tail, 0, ScaleMul<D>(a.ScaleAt(o, full))));
      std::memcpy(d + full, out, static_cast<size_t>(in - full) * sizeof(float));
    }
  }
}

// The rows of x from which prefill widens block-scaled weights once per block
// of weight rows (WidenRows) instead of once per four rows of x.
inline constexpr int64_t kWidenOnceRows = 8;

// Prefill over block-scaled weights: each block of `block` weight rows is
// widened once (WidenRows) into this thread's panel and the path's F32 rows
// kernel `rows_f32` runs over it, the same loads' values in the same order
// (bit-identical outputs).
template <DType D>
VISMOE_AVX2 inline void RowsWidened(const MatMulArgs& a, int64_t o0, int64_t o1, int64_t block,
                                    void (*rows_f32)(const MatMulArgs&, int64_t, int64_t)) {
  thread_local std::vector<float> panel;
  if (panel.size() < static_cast<size_t>(block * a.in)) panel.resize(block * a.in);
  for (int64_t ob = o0; ob < o1; ob += block) {
    const int64_t oe = std::min(ob + block, o1);
    WidenRows<D>(a, ob, oe, panel.data());
    MatMulArgs f = a;  // rows [ob, oe) as rows [0, oe - ob) of an fp32 matrix
    f.w = panel.data();
    f.dtype = DType::kF32;
    f.scale = nullptr;
    f.scale_e8m0 = nullptr;
    f.bias = a.bias == nullptr ? nullptr : a.bias + ob;
    f.y = a.y + ob;
    rows_f32(f, 0, oe - ob);
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
