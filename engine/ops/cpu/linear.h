// CPU reference matrix product with on-the-fly weight widening.
#ifndef VISMOE_ENGINE_OPS_CPU_LINEAR_H_
#define VISMOE_ENGINE_OPS_CPU_LINEAR_H_

#include <cstdint>

#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"

namespace vismoe::cpu {

// y[n, out] = x[n, in] . w[out, in]^T (+ bias[out]), fp32 accumulation.
// w and bias may be F32, F16 or BF16. x and y must not overlap.
// REQUIRES: w.rank() == 2, w.dim(1) == in; bias (if not null) has out elements.
void Linear(ThreadPool* pool, const float* x, int64_t n, int64_t in, const TensorView& w,
            const TensorView* bias, float* y);

// Same, with w given transposed: y[n, out] = x[n, in] . w_t[in, out].
// Used for the fused expert layout gate_up_proj [E, H, 2I] / down_proj [E, I, H].
void LinearTransposed(ThreadPool* pool, const float* x, int64_t n, int64_t in,
                      const TensorView& w_t, float* y);

}  // namespace vismoe::cpu

#endif  // VISMOE_ENGINE_OPS_CPU_LINEAR_H_
