// The AVX2 + FMA + F16C path of the matrix kernels. Every function here
// carries the target attribute instead of the file being built with -mavx2,
// so no AVX2 code can leak into shared inline functions (templates from
// headers) that the portable path also calls; linear.cc calls in only after
// DetectedKernelPath() said the CPU has the features.
// Weights go straight from memory into YMM registers (BF16: zero-extend and
// shift; F16: vcvtph2ps), so nothing is widened into scratch, except
// block-scaled weights at prefill (RowsWidened: once per block of rows
// instead of once per four rows of x). Rows kernels
// block MB rows of x by NB weight rows (MB*NB independent accumulators that
// share every load); cols kernels block MB rows of x by NV vectors of eight
// output columns. Accumulation order: see matmul_kernels.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/ops/cpu/matmul_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "engine/ops/cpu/avx2_helpers.h"

namespace vismoe::cpu::internal {
namespace {

// y[t0+r, o+j] (r < MB, j < NB): MB*NB accumulators over the full chunks of
// eight, then the tail chunk through zero-padded copies (never for MXFP4:
// in is a multiple of its 32-wide blocks). Block-scaled weights load with
// their block's scale (mul[j]), refreshed as i enters a column block.
template <DType D, int MB, int NB>
VISMOE_AVX2 void RowTile(const MatMulArgs& a, int64_t t0, int64_t o) {
  const char* w = static_cast<const char*>(a.w) + Bytes<D>(o * a.in);
  const size_t wstride = Bytes<D>(a.in);
  const float* x = a.x + t0 * a.in;
  __m256 acc[MB][NB];
  __m256 mul[NB];
#pragma GCC unroll 16
  for (int r = 0; r < MB; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) acc[r][j] = _mm256_setzero_ps();
#pragma GCC unroll 16
  for (int j = 0; j < NB; ++j) mul[j] = _mm256_setzero_ps();
  const void* srow[NB] = {};
  SetScaleRows<D, NB>(a, o, srow);
  int64_t next_block = 0, block = 0;
  const int64_t full = a.in & ~int64_t{7};
  for (int64_t i = 0; i < full; i += 8) {
    if constexpr (kScaled<D>) {
      if (i == next_block) {
        SetScaleMuls<D, NB>(srow, block++, mul);
        next_block += a.scale_cols;
      }
    }
    __m256 wv[NB];
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) wv[j] = LoadW8<D>(w + j * wstride, i, mul[j]);
#pragma GCC unroll 16
    for (int r = 0; r < MB; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * a.in + i);
#pragma GCC unroll 16
      for (int j = 0; j < NB; ++j) acc[r][j] = _mm256_fmadd_ps(xv, wv[j], acc[r][j]);
    }
  }
  if (const int64_t rest = a.in - full; rest > 0) {
    alignas(32) float xp[8];
    alignas(32) char wp[8 * 4];
    if constexpr (kScaled<D>) SetScaleMuls<D, NB>(srow, full / a.scale_cols, mul);
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) {
      std::memset(wp, 0, sizeof(wp));
      std::memcpy(wp, w + j * wstride + Bytes<D>(full), Bytes<D>(rest));
      const __m256 wv = LoadW8<D>(wp, 0, mul[j]);
#pragma GCC unroll 16
      for (int r = 0; r < MB; ++r) {
        std::memset(xp, 0, sizeof(xp));
        std::memcpy(xp, x + r * a.in + full, rest * sizeof(float));
        acc[r][j] = _mm256_fmadd_ps(_mm256_load_ps(xp), wv, acc[r][j]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MB; ++r) {
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) {
      const float b = a.bias == nullptr ? 0.0f : a.bias[o + j];
      a.y[(t0 + r) * a.out + o + j] = Hsum(acc[r][j]) + b;
    }
  }
}

// Output rows [o0, o1) for rows [t0, t0 + MB) of x: NB weight rows at a time,
// narrower tiles for the remainder (same per-output order either way).
// Decode (MB = 1) reads one weight row at a time: a matrix-vector product
// streams its weights from DRAM once, and on the machines measured here
// (Zen 3 guests) one sequential stream reads 2.5x faster than two or four
// rows interleaved, although the one FMA chain is latency-bound in cache
// (tests/bench/llamacpp_compare.md).
// Prefill tiles are 4 x 3: twelve accumulators share three weight and four
// x loads per step (1.5x the GFLOP/s of 4 x 2 here).
template <DType D, int MB>
VISMOE_AVX2 void RowStrip(const MatMulArgs& a, int64_t t0, int64_t o0, int64_t o1) {
  constexpr int kNb = MB == 1 ? 1 : 3;
  int64_t o = o0;
  for (; o + kNb <= o1; o += kNb) RowTile<D, MB, kNb>(a, t0, o);
  for (; o < o1; ++o) RowTile<D, MB, 1>(a, t0, o);
}

// Blocks of 12 weight rows stay in L1/L2 while every block of four x rows
// passes over them (prefill); decode (n = 1) streams the weights once.
template <DType D>
VISMOE_AVX2 void Rows(const MatMulArgs& a, int64_t o0, int64_t o1) {
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

// y[t0+r, o + 8v + l] (r < MB, v < NV): one FMA chain per output over i.
template <DType D, int MB, int NV>
VISMOE_AVX2 void ColTile(const MatMulArgs& a, int64_t t0, int64_t o) {
  __m256 acc[MB][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MB; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
  const char* w = static_cast<const char*>(a.w) + o * kSize<D>;
  const size_t wstride = a.out * kSize<D>;
  const float* x = a.x + t0 * a.in;
  for (int64_t i = 0; i < a.in; ++i, w += wstride) {
    __m256 xb[MB];
#pragma GCC unroll 16
    for (int r = 0; r < MB; ++r) xb[r] = _mm256_broadcast_ss(x + r * a.in + i);
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      const __m256 wv = Load8<D>(w, 8 * v);
#pragma GCC unroll 16
      for (int r = 0; r < MB; ++r) acc[r][v] = _mm256_fmadd_ps(xb[r], wv, acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MB; ++r) {
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(a.y + (t0 + r) * a.out + o + 8 * v, acc[r][v]);
  }
}

// Weight element i of p, widened exactly (what a lane of Load8 holds).
template <DType D>
VISMOE_AVX2 inline float ScalarWeight(const void* p, int64_t i) {
  const char* q = static_cast<const char*>(p) + i * kSize<D>;
  if constexpr (D == DType::kF32) {
    float wf;
    std::memcpy(&wf, q, 4);
    return wf;
  } else {
    uint16_t h;
    std::memcpy(&h, q, 2);
    return D == DType::kBF16 ? Bf16ToFloat(h) : _cvtsh_ss(h);
  }
}

// Fewer than eight columns left: scalar fma, the same single rounding per step
// as a vector lane, so these outputs equal what a vector tile would give.
template <DType D>
VISMOE_AVX2 void ColScalar(const MatMulArgs& a, int64_t t, int64_t o) {
  float acc = 0.0f;
  for (int64_t i = 0; i < a.in; ++i) {
    acc = std::fma(a.x[t * a.in + i], ScalarWeight<D>(a.w, i * a.out + o), acc);
  }
  a.y[t * a.out + o] = acc;
}

// One row of x (decode): y[t, o0..o1) accumulates in memory while the weight
// rows stream through once, in order (y[o] = fma(x[i], w[i, o], y[o]) for
// i = 0..in-1: the same single chain per output as ColTile). Walking 64
// columns down every row instead reads a strided pattern at a third of the
// bandwidth.
template <DType D>
VISMOE_AVX2 void ColSweep(const MatMulArgs& a, int64_t t, int64_t o0, int64_t o1) {
  float* y = a.y + t * a.out;
  std::fill(y + o0, y + o1, 0.0f);
  const int64_t vec_end = o0 + ((o1 - o0) & ~int64_t{7});
  const char* w = static_cast<const char*>(a.w);
  for (int64_t i = 0; i < a.in; ++i) {
    const float xi = a.x[t * a.in + i];
    const __m256 xb = _mm256_set1_ps(xi);
    const char* row = w + i * a.out * kSize<D>;
    int64_t o = o0;
    for (; o + 32 <= vec_end; o += 32) {
      const __m256 w0 = Load8<D>(row, o), w1 = Load8<D>(row, o + 8);
      const __m256 w2 = Load8<D>(row, o + 16), w3 = Load8<D>(row, o + 24);
      const __m256 y0 = _mm256_loadu_ps(y + o), y1 = _mm256_loadu_ps(y + o + 8);
      const __m256 y2 = _mm256_loadu_ps(y + o + 16), y3 = _mm256_loadu_ps(y + o + 24);
      _mm256_storeu_ps(y + o, _mm256_fmadd_ps(xb, w0, y0));
      _mm256_storeu_ps(y + o + 8, _mm256_fmadd_ps(xb, w1, y1));
      _mm256_storeu_ps(y + o + 16, _mm256_fmadd_ps(xb, w2, y2));
      _mm256_storeu_ps(y + o + 24, _mm256_fmadd_ps(xb, w3, y3));
    }
    for (; o < vec_end; o += 8) {
      _mm256_storeu_ps(y + o, _mm256_fmadd_ps(xb, Load8<D>(row, o), _mm256_loadu_ps(y + o)));
    }
    for (; o < o1; ++o) y[o] = std::fma(xi, ScalarWeight<D>(row, o), y[o]);
  }
}

template <DType D, int MB>
VISMOE_AVX2 void ColStrip(const MatMulArgs& a, int64_t t0, int64_t o0, int64_t o1) {
  constexpr int kNv = MB == 1 ? 8 : (MB == 2 ? 4 : 2);
  int64_t o = o0;
  for (; o + 8 * kNv <= o1; o += 8 * kNv) ColTile<D, MB, kNv>(a, t0, o);
  for (; o + 8 <= o1; o += 8) ColTile<D, MB, 1>(a, t0, o);
  for (; o < o1; ++o) {
    for (int r = 0; r < MB; ++r) ColScalar<D>(a, t0 + r, o);
  }
}

// Prefill over [in, out] weights: a panel of kPanel columns is widened once
// into contiguous fp32 scratch (exact), then every block of x rows runs over
// it with 3 x 4 vector tiles; reading the strided BF16/F16 columns in the
// tiles instead ran at under half the GFLOP/s. Per-output order as ColTile.
constexpr int64_t kPanel = 32;

template <DType D>
VISMOE_AVX2 void PackPanel(const MatMulArgs& a, int64_t o, float* panel) {
  const char* w = static_cast<const char*>(a.w) + o * kSize<D>;
  for (int64_t i = 0; i < a.in; ++i, w += a.out * kSize<D>) {
#pragma GCC unroll 4
    for (int v = 0; v < kPanel / 8; ++v)
      _mm256_storeu_ps(panel + i * kPanel + 8 * v, Load8<D>(w, 8 * v));
  }
}

template <int MB>
VISMOE_AVX2 void PanelTile(const MatMulArgs& a, const float* panel, int64_t t0, int64_t o) {
  constexpr int kNv = kPanel / 8;
  __m256 acc[MB][kNv];
#pragma GCC unroll 16
  for (int r = 0; r < MB; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < kNv; ++v) acc[r][v] = _mm256_setzero_ps();
  const int64_t in = a.in;  // a local: GCC then keeps acc in registers
  const float* x = a.x + t0 * in;
  for (int64_t i = 0; i < in; ++i, panel += kPanel) {
    __m256 xb[MB];
#pragma GCC unroll 16
    for (int r = 0; r < MB; ++r) xb[r] = _mm256_broadcast_ss(x + r * in + i);
#pragma GCC unroll 16
    for (int v = 0; v < kNv; ++v) {
      const __m256 wv = _mm256_loadu_ps(panel + 8 * v);
#pragma GCC unroll 16
      for (int r = 0; r < MB; ++r) acc[r][v] = _mm256_fmadd_ps(xb[r], wv, acc[r][v]);
    }
  }
  // Constant indices here too: a loop GCC does not unroll keeps acc in memory
  // and stores all of it in every step of the loop above.
#pragma GCC unroll 16
  for (int r = 0; r < MB; ++r) {
#pragma GCC unroll 16
    for (int v = 0; v < kNv; ++v) _mm256_storeu_ps(a.y + (t0 + r) * a.out + o + 8 * v, acc[r][v]);
  }
}

template <DType D>
VISMOE_AVX2 int64_t ColsPacked(const MatMulArgs& a, int64_t o0, int64_t o1) {
  thread_local std::vector<float> panel;  // grows to the largest in * kPanel, then reused
  panel.resize(static_cast<size_t>(a.in * kPanel));
  int64_t o = o0;
  for (; o + kPanel <= o1; o += kPanel) {
    PackPanel<D>(a, o, panel.data());
    int64_t t = 0;
    for (; t + 3 <= a.n; t += 3) PanelTile<3>(a, panel.data(), t, o);
    if (a.n - t == 2) PanelTile<2>(a, panel.data(), t, o);
    if (a.n - t == 1) PanelTile<1>(a, panel.data(), t, o);
  }
  return o;  // columns [o, o1) are left
}

template <DType D>
VISMOE_AVX2 void Cols(const MatMulArgs& a, int64_t o0, int64_t o1) {
  if (a.n == 1) return ColSweep<D>(a, 0, o0, o1);
  if (a.n >= 4) o0 = ColsPacked<D>(a, o0, o1);
  int64_t t = 0;
  for (; t + 4 <= a.n; t += 4) ColStrip<D, 4>(a, t, o0, o1);
  switch (a.n - t) {
    case 3:
      ColStrip<D, 3>(a, t, o0, o1);
      break;
    case 2:
      ColStrip<D, 2>(a, t, o0, o1);
      break;
    case 1:
      ColStrip<D, 1>(a, t, o0, o1);
      break;
    default:
      break;
  }
}

}  // namespace

void LinearRowsAvx2(const MatMulArgs& a, int64_t o0, int64_t o1) {
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

void LinearColsAvx2(const MatMulArgs& a, int64_t o0, int64_t o1) {
  switch (a.dtype) {
    case DType::kF32:
      return Cols<DType::kF32>(a, o0, o1);
    case DType::kBF16:
      return Cols<DType::kBF16>(a, o0, o1);
    case DType::kF16:
      return Cols<DType::kF16>(a, o0, o1);
    case DType::kF8E4M3:
    case DType::kMxFp4:
    case DType::kU8:
    case DType::kE8M0:
      break;
  }
  Unsupported(a, "[in, out] matrix");
}

}  // namespace vismoe::cpu::internal

#else  // not x86: DetectedKernelPath() never picks kAvx2.

namespace vismoe::cpu::internal {
void LinearRowsAvx2(const MatMulArgs& a, int64_t o0, int64_t o1) { LinearRowsPortable(a, o0, o1); }
void LinearColsAvx2(const MatMulArgs& a, int64_t o0, int64_t o1) { LinearColsPortable(a, o0, o1); }
}  // namespace vismoe::cpu::internal

#endif
