// Internal to engine/ops/cpu: the per-path bodies behind cpu::Linear and
// cpu::LinearTransposed (linear.cc picks one with ActiveKernelPath() and splits
// the output over the thread pool). Not for use outside ops/cpu.
//
// Accumulation order (what makes batched decode bit-identical to running each
// sequence alone): the value of y[t, o] is computed by the same sequence of
// floating-point operations whatever n is, wherever row t sits in the call,
// and however [o0, o1) was split across threads. Blocking over rows or output
// columns only decides which register holds an accumulator, never the order
// of the additions into it.
//   Rows kernels (weights [out, in]): eight lanes; lane l sums x[i] * w[i] for
//   i = l (mod 8) in increasing i (the last partial chunk zero-padded), then the
//   lanes are reduced as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), then + bias.
//   The AVX-512 rows kernels use sixteen lanes (i = l mod 16), add lane l+8
//   into lane l, then reduce those eight as above.
//   Cols kernels (weights [in, out]): one chain per output, i = 0..in-1 in order
//   (the AVX-512 path runs the AVX2 cols kernels).
// The AVX2 and AVX-512 paths fuse each multiply-add (FMA, one rounding); the
// portable path rounds the product and the sum separately. Paths agree within
// fp32 summation error, not bit for bit; within one path the order is fixed.
// Thread safety: pure functions of their arguments; callers give concurrent
// calls disjoint [o0, o1) ranges.
#ifndef VISMOE_ENGINE_OPS_CPU_MATMUL_KERNELS_H_
#define VISMOE_ENGINE_OPS_CPU_MATMUL_KERNELS_H_

#include <cstdint>

#include "engine/core/dtype.h"

namespace vismoe::cpu::internal {

struct MatMulArgs {
  const float* x = nullptr;  // [n, in] row-major
  int64_t n = 0;
  int64_t in = 0;
  const void* w = nullptr;  // [out, in] (rows kernels) or [in, out] (cols kernels)
  DType dtype = DType::kF32;
  int64_t out = 0;
  const float* bias = nullptr;  // [out] fp32 or null (rows kernels only)
  float* y = nullptr;           // [n, out] row-major
  // Block-scaled weights only (F8_E4M3, MXFP4; rows kernels): the block
  // scales widened to fp32, [ceil(out / scale_rows), scale_stride],
  // scale_stride = ceil(in / scale_cols). Each weight is widened to its e4m3
  // or e2m1 value * its block's scale (one fp32 rounding for e4m3, exact for
  // e2m1: the dequantised weight), then accumulated as any other dtype.
  // REQUIRES: scale_cols % 16 == 0, so no SIMD load of 8 or 16 weights
  // straddles two blocks; MXFP4: in % 32 == 0 (whole blocks, no tail).
  // MXFP4 sets scale_e8m0 instead: the e8m0 bytes, read in place (same
  // indexing), each converted as it is used (E8m0ToFloat).
  const float* scale = nullptr;
  const uint8_t* scale_e8m0 = nullptr;
  int64_t scale_rows = 0, scale_cols = 0, scale_stride = 0;

  // The scale of weight (o, i). REQUIRES: a scale set.
  float ScaleAt(int64_t o, int64_t i) const;
  // The scales of weight row o, one per column block (float, or e8m0 bytes
  // for MXFP4; ScaleIn reads one): the kernels step through it block by block
  // (no division per block). REQUIRES: a scale set.
  const void* ScaleRow(int64_t o) const {
    const int64_t first = (o / scale_rows) * scale_stride;
    return scale_e8m0 != nullptr ? static_cast<const void*>(scale_e8m0 + first) : scale + first;
  }
};

// Column block `block` of a ScaleRow of dtype D's weights.
template <DType D>
inline float ScaleIn(const void* row, int64_t block) {
  if constexpr (D == DType::kMxFp4) return E8m0ToFloat(static_cast<const uint8_t*>(row)[block]);
  return static_cast<const float*>(row)[block];
}

inline float MatMulArgs::ScaleAt(int64_t o, int64_t i) const {
  const int64_t k = (o / scale_rows) * scale_stride + i / scale_cols;
  return scale_e8m0 != nullptr ? E8m0ToFloat(scale_e8m0[k]) : scale[k];
}

// y[t, o] for every t and o in [o0, o1), weights [out, in].
void LinearRowsPortable(const MatMulArgs& a, int64_t o0, int64_t o1);
void LinearRowsAvx2(const MatMulArgs& a, int64_t o0, int64_t o1);
void LinearRowsAvx512(const MatMulArgs& a, int64_t o0, int64_t o1);

// y[t, o] for every t and o in [o0, o1), weights [in, out] (read in place).
// REQUIRES: dtype F32, F16 or BF16 (block-scaled weights are [out, in]).
void LinearColsPortable(const MatMulArgs& a, int64_t o0, int64_t o1);
void LinearColsAvx2(const MatMulArgs& a, int64_t o0, int64_t o1);

// A kernel called with weights it cannot read (block-scaled ones in a cols
// kernel, raw U8 / E8M0 anywhere): a programming error (Linear refuses them
// first); reports and aborts.
[[noreturn]] void Unsupported(const MatMulArgs& a, const char* kernel);

// F8_E4M3 -> fp32 for all 256 bit patterns (E4m3ToFloat's values).
const float* E4m3Table();

// The sixteen e2m1 codes' values (E2m1ToFloat's).
const float* E2m1Table();

// F16 -> fp32 for all 65536 bit patterns (F16ToFloat's values), built on
// first use; the portable path's F16 loads go through it.
const float* F16Table();

}  // namespace vismoe::cpu::internal

#endif  // VISMOE_ENGINE_OPS_CPU_MATMUL_KERNELS_H_
