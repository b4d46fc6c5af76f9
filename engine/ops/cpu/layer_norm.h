// LayerNorm with affine weight and bias, as torch.nn.LayerNorm computes it in
// fp32: y = (x - mean) / sqrt(var + eps) * weight + bias, with the biased
// variance over the last dimension. Used by the vision tower and its mergers.
#ifndef VISMOE_ENGINE_OPS_CPU_LAYER_NORM_H_
#define VISMOE_ENGINE_OPS_CPU_LAYER_NORM_H_

#include <cstdint>

#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"

namespace vismoe::cpu {

// y[n, dim] = LayerNorm(x[n, dim]). weight and bias may be F32, F16 or BF16.
// y may alias x. Thread safety: reentrant; rows are split over `pool` (null
// runs inline).
// REQUIRES: weight.numel() == bias.numel() == dim.
void LayerNorm(ThreadPool* pool, const float* x, int64_t n, int64_t dim, const TensorView& weight,
               const TensorView& bias, float eps, float* y);

}  // namespace vismoe::cpu

#endif  // VISMOE_ENGINE_OPS_CPU_LAYER_NORM_H_
