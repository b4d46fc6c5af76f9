// The AVX-512 path of the rows kernels (weights [out, in]): the AVX2 path's
// structure (matmul_avx2.cc) on 16-wide ZMM registers. Decode's matrix-vector
// product is one FMA chain per weight row, latency-bound wherever the row
// comes from cache; sixteen lanes per chain halve the steps, so one thread
// decodes faster, and prefill's 4 x 3 tiles do half the loop trips. Weights go
// straight into ZMM registers (BF16: zero-extend and shift; F16: vcvtph2ps).
// The cols kernels (weights [in, out]) keep one chain per output whatever the
// vector width, so this path runs the AVX2 ones (the same bits). Every
// function carries the target attribute (see matmul_avx2.cc for why).
// Accumulation order: see matmul_kernels.h (sixteen lanes here).
#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/ops/cpu/matmul_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() (a self-initialised
// register) as the unused merge source, which -Wuninitialized flags once they
// are inlined (GCC bug 105593, fixed in GCC 13): not a bug here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "engine/ops/cpu/avx2_helpers.h"

#define VISMOE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

namespace vismoe::cpu::internal {
namespace {

// The `mul` of Load16 for a block whose scale is `scale`: 256 * scale for
// e4m3, the sixteen e2m1 values (the sign in the table) times scale for
// MXFP4.
template <DType D>
VISMOE_AVX512 inline __m512 ScaleMul16(float scale) {
  if constexpr (D == DType::kMxFp4) {
    const __m512 values = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f,
                                         -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    return _mm512_mul_ps(values, _mm512_set1_ps(scale));
  }
  return _mm512_set1_ps(256.0f * scale);
}

// Sixteen weights of dtype D starting at element i of p, widened exactly
// (e4m3: times `mul` = 256 * their block's scale, as Load8E4m3; MXFP4: looked
// up in `mul` = the scaled values, as Load8Mxfp4).
template <DType D>
VISMOE_AVX512 inline __m512 Load16(const void* p, int64_t i, __m512 mul) {
  if constexpr (D == DType::kMxFp4) {
    // Eight bytes, each doubled (b0 b0 b1 b1 ...) and widened to a lane:
    // shifting the odd lanes by four leaves each lane's nibble in its low
    // four bits, which is all vpermps reads. All in vector registers.
    const __m128i b =
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(p) + i / 2));
    const __m512i lanes = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));
    const __m512i codes =
        _mm512_srlv_epi32(lanes, _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4));
    return _mm512_permutexvar_ps(codes, mul);
  } else if constexpr (D == DType::kF8E4M3) {  // as Load8E4m3, sixteen at a time
    const __m128i b =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(p) + i));
    const __m256i v = _mm256_cvtepu8_epi16(b);
    const __m256i low7 = _mm256_and_si256(v, _mm256_set1_epi16(0x7f));
    const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x80)), 8);
    const __m256i nan = _mm256_and_si256(_mm256_cmpeq_epi16(low7, _mm256_set1_epi16(0x7f)),
                                         _mm256_set1_epi16(0x7e00));
    const __m256i h = _mm256_or_si256(_mm256_or_si256(sign, _mm256_slli_epi16(low7, 7)), nan);
    return _mm512_mul_ps(_mm512_cvtph_ps(h), mul);
  } else if constexpr (D == DType::kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(p) + i);
  } else {
    const __m256i h =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i));
    if constexpr (D == DType::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// Lanes l and l+8 first, then the eight sums in the AVX2 path's order:
// ((m0+m4)+(m2+m6)) + ((m1+m5)+(m3+m7)) with m_l = l_l + l_(l+8).
VISMOE_AVX512 inline float Hsum16(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return Hsum(_mm256_add_ps(lo, hi));
}

// The last in % 16 elements of MB rows of x and of NB weight rows, zero-padded
// to sixteen so the tail chunk runs like a full one (zeros add nothing).
template <DType D, int MB, int NB>
struct Tail {
  alignas(64) float x[MB][16];
  alignas(64) char w[NB][16 * 4];
};

template <DType D, int MB, int NB>
VISMOE_AVX512 inline void PadTail(const float* x, int64_t in, const char* w, size_t wstride,
                                  int64_t full, Tail<D, MB, NB>* t) {
  const int64_t rest = in - full;
  std::memset(t, 0, sizeof(*t));
  for (int r = 0; r < MB; ++r) std::memcpy(t->x[r], x + r * in + full, rest * sizeof(float));
  for (int j = 0; j < NB; ++j) {
    std::memcpy(t->w[j], w + j * wstride + Bytes<D>(full), Bytes<D>(rest));
  }
}

// Decode: y[t, o] as one 16-lane FMA chain over weight row o (streamed once).
template <DType D>
VISMOE_AVX512 void RowDot(const MatMulArgs& a, int64_t t, int64_t o) {
  const char* w = static_cast<const char*>(a.w) + Bytes<D>(o * a.in);
  const float* x = a.x + t * a.in;
  const int64_t in = a.in;
  const int64_t full = in & ~int64_t{15};
  __m512 acc = _mm512_setzero_ps();
  __m512 mul = _mm512_setzero_ps();
  const void* srow = kScaled<D> ? a.ScaleRow(o) : nullptr;
  int64_t next_block = 0, block = 0;
  for (int64_t i = 0; i < full; i += 16) {
    if constexpr (kScaled<D>) {
      if (i == next_block) {
        mul = ScaleMul16<D>(ScaleIn<D>(srow, block++));
        next_block += a.scale_cols;
      }
    }
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), Load16<D>(w, i, mul), acc);
  }
  if (full < in) {
    if constexpr (kScaled<D>) mul = ScaleMul16<D>(a.ScaleAt(o, full));
    Tail<D, 1, 1> tail;
    PadTail<D, 1, 1>(x, in, w, 0, full, &tail);
    acc = _mm512_fmadd_ps(_mm512_load_ps(tail.x[0]), Load16<D>(tail.w[0], 0, mul), acc);
  }
  const float b = a.bias == nullptr ? 0.0f : a.bias[o];
  a.y[t * a.out + o] = Hsum16(acc) + b;
}

// Prefill tiles: the same sixteen lanes as RowDot, held as two eight-lane
// halves (lanes 0-7 and 8-15) in YMM registers, 2*MB*NB accumulators in the 32
// that AVX-512 VL gives. Every lane sees the same FMAs in the same order as in
// a ZMM register, and lo + hi is Hsum16's first step, so each output is
// bit-identical to RowDot's; on Zen 4 (ZMM ops split in two halves, one
// 512-bit load per cycle) this ran at 1.4x the GFLOP/s of 4 x 3 ZMM tiles.
template <DType D, int MB, int NB>
VISMOE_AVX512 void HalfTile(const MatMulArgs& a, int64_t t0, int64_t o) {
  const char* w = static_cast<const char*>(a.w) + Bytes<D>(o * a.in);
  const size_t wstride = Bytes<D>(a.in);
  const float* x = a.x + t0 * a.in;
  __m256 lo[MB][NB], hi[MB][NB];
  __m256 mul[NB];
#pragma GCC unroll 16
  for (int r = 0; r < MB; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) lo[r][j] = hi[r][j] = _mm256_setzero_ps();
#pragma GCC unroll 16
  for (int j = 0; j < NB; ++j) mul[j] = _mm256_setzero_ps();
  const void* srow[NB] = {};
  SetScaleRows<D, NB>(a, o, srow);
  int64_t next_block = 0, block = 0;
  const int64_t in = a.in;
  const int64_t full = in & ~int64_t{15};
  for (int64_t i = 0; i < full; i += 16) {
    if constexpr (kScaled<D>) {
      if (i == next_block) {
        SetScaleMuls<D, NB>(srow, block++, mul);
        next_block += a.scale_cols;
      }
    }
    __m256 wl[NB], wh[NB];
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) {
      wl[j] = LoadW8<D>(w + j * wstride, i, mul[j]);
      wh[j] = LoadW8<D>(w + j * wstride, i + 8, mul[j]);
    }
#pragma GCC unroll 16
    for (int r = 0; r < MB; ++r) {
      const __m256 xl = _mm256_loadu_ps(x + r * in + i);
      const __m256 xh = _mm256_loadu_ps(x + r * in + i + 8);
#pragma GCC unroll 16
      for (int j = 0; j < NB; ++j) {
        lo[r][j] = _mm256_fmadd_ps(xl, wl[j], lo[r][j]);
        hi[r][j] = _mm256_fmadd_ps(xh, wh[j], hi[r][j]);
      }
    }
  }
  if (full < in) {
    Tail<D, MB, NB> tail;
    PadTail<D, MB, NB>(x, in, w, wstride, full, &tail);
    if constexpr (kScaled<D>) SetScaleMuls<D, NB>(srow, full / a.scale_cols, mul);
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) {
      const __m256 wvl = LoadW8<D>(tail.w[j], 0, mul[j]);
      const __m256 wvh = LoadW8<D>(tail.w[j], 8, mul[j]);
#pragma GCC unroll 16
      for (int r = 0; r < MB; ++r) {
        lo[r][j] = _mm256_fmadd_ps(_mm256_load_ps(tail.x[r]), wvl, lo[r][j]);
        hi[r][j] = _mm256_fmadd_ps(_mm256_load_ps(tail.x[r] + 8), wvh, hi[r][j]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MB; ++r) {
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) {
      const float b = a.bias == nullptr ? 0.0f : a.bias[o + j];
      a.y[(t0 + r) * a.out + o + j] = Hsum(_mm256_add_ps(lo[r][j], hi[r][j])) + b;
    }
  }
}

// As matmul_avx2.cc's RowStrip: decode streams one weight row at a time in
// ZMM registers, prefill runs 4 x 3 tiles of YMM halves.
template <DType D, int MB>
VISMOE_AVX512 void RowStrip(const MatMulArgs& a, int64_t t0, int64_t o0, int64_t o1) {
  if constexpr (MB == 1) {
    for (int64_t o = o0; o < o1; ++o) RowDot<D>(a, t0, o);
  } else {
    int64_t o = o0;
    for (; o + 3 <= o1; o += 3) HalfTile<D, MB, 3>(a, t0, o);
    for (; o < o1; ++o) HalfTile<D, MB, 1>(a, t0, o);
  }
}

template <DType D>
VISMOE_AVX512 void Rows(const MatMulArgs& a, int64_t o0, int64_t o1) {
  constexpr int64_t kRowBlock = 12;
  if constexpr (kScaled<D>) {
    if (a.n >= kWidenOnceRows) return RowsWidened<D>(a, o0, o1, kRowBlock, &Rows<DType::kF32>);
  }
  for (int64_t ob = o0; ob < o1; ob += kRowBlock) {
    const int64_t oe = std::min(ob + kRowBlock, o1);
    int64_t t = 0;
    for (; t + 4 <= a.n; t += 4) RowStrip<D, 4>(a, t, ob, oe);
    switch (a.n - t) {
      case 3:
        RowStrip<D, 3>(a, t, ob, oe);
        break;
      case 2:
        RowStrip<D, 2>(a, t, ob, oe);
        break;
      case 1:
        RowStrip<D, 1>(a, t, ob, oe);
        break;
      default:
        break;
    }
  }
}

}  // namespace

void LinearRowsAvx512(const MatMulArgs& a, int64_t o0, int64_t o1) {
  switch (a.dtype) {
    case DType::kF32:
      return Rows<DType::kF32>(a, o0, o1);
    case DType::kBF16:
      return Rows<DType::kBF16>(a, o0, o1);
    case DType::kF16:
      return Rows<DType::kF16>(a, o0, o1);
    case DType::kF8E4M3:
      return Rows<DType::kF8E4M3>(a, o0, o1);
    case DType::kMxFp4:
      return Rows<DType::kMxFp4>(a, o0, o1);
    case DType::kU8:
    case DType::kE8M0:
      break;
  }
  Unsupported(a, "rows");
}

}  // namespace vismoe::cpu::internal

#else  // not x86: DetectedKernelPath() never picks kAvx512.

namespace vismoe::cpu::internal {
void LinearRowsAvx512(const MatMulArgs& a, int64_t o0, int64_t o1) {
  LinearRowsPortable(a, o0, o1);
}
}  // namespace vismoe::cpu::internal

#endif
