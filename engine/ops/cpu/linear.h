// CPU matrix products y = x W^T over weights stored as F32, F16 or BF16, with
// fp32 activations and accumulation.
//
// Linear / LinearTransposed are the fast kernels the backends call: they read
// the weights in their stored dtype and layout (no widening into scratch, no
// transposed copy) on the path ActiveKernelPath() names (kernel_dispatch.h),
// split the outputs over the pool, and compute each output row by an order
// that depends on neither the number of rows in the call, the row's place in
// it, nor the thread split (matmul_kernels.h): batched decode stays
// bit-identical to decoding each sequence alone.
// LinearReference / LinearTransposedReference are the plain fp32 reference
// (weights widened row by row, the shared four-sum Dot): slow, simple, kept to
// test the fast kernels against (tests/engine/ops/cpu/linear_test.cc).
// Thread safety: reentrant; x and y must not overlap. Ownership: views only.
#ifndef VISMOE_ENGINE_OPS_CPU_LINEAR_H_
#define VISMOE_ENGINE_OPS_CPU_LINEAR_H_

#include <cstdint>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"

namespace vismoe::cpu {

// y[n, out] = x[n, in] . w[out, in]^T (+ bias[out]), fp32 accumulation.
// w and bias may be F32, F16 or BF16; w also block-scaled F8_E4M3
// (w.scale.cols a multiple of 16) or MXFP4 (E8M0 scales per 32 inputs, in a
// multiple of 32), each weight dequantised exactly as it is read. x and y
// must not overlap.
// REQUIRES: w.rank() == 2, w.dim(1) == in; bias (if not null) has out elements.
void Linear(ThreadPool* pool, const float* x, int64_t n, int64_t in, const TensorView& w,
            const TensorView* bias, float* y);

// Same, with w given transposed: y[n, out] = x[n, in] . w_t[in, out], read in
// place (the fused expert layout gate_up_proj [E, H, 2I] / down_proj [E, I, H]).
// REQUIRES: w_t.rank() == 2, w_t.dim(0) == in, w_t not block-scaled.
void LinearTransposed(ThreadPool* pool, const float* x, int64_t n, int64_t in,
                      const TensorView& w_t, float* y);

// The fp32 values of a [out, in] block-scaled F8_E4M3 matrix, each weight
// dequantised exactly as Linear reads it (its e4m3 value times its block's
// scale, one fp32 rounding): a matrix read through LinearTransposed or
// sliced off its scale blocks (DeepSeek's kv_b_proj, per head).
// REQUIRES: w.rank() == 2, w.dtype == kF8E4M3 with its scale.
std::vector<float> DequantizeF8(const TensorView& w);

// The reference versions of the two above (same contracts).
void LinearReference(ThreadPool* pool, const float* x, int64_t n, int64_t in, const TensorView& w,
                     const TensorView* bias, float* y);
void LinearTransposedReference(ThreadPool* pool, const float* x, int64_t n, int64_t in,
                               const TensorView& w_t, float* y);

}  // namespace vismoe::cpu

#endif  // VISMOE_ENGINE_OPS_CPU_LINEAR_H_
