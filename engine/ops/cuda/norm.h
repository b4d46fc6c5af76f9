// RMSNorm (also per-head QK-norm) and LayerNorm on bf16 activations with fp32
// statistics. Semantics mirror engine/ops/cpu/rms_norm.h and layer_norm.h;
// results are rounded to bf16 once, at the store.
#ifndef VISMOE_ENGINE_OPS_CUDA_NORM_H_
#define VISMOE_ENGINE_OPS_CUDA_NORM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/device/cuda/types.h"

namespace vismoe::cuda {

// For token i < n and head h < num_heads, the `dim` values at
// x[i * x_row_stride + h * dim] are normalised into y[i * y_row_stride + h * dim]:
// y = weight * (x * rsqrt(mean(x^2) + eps)). Plain RMSNorm: num_heads = 1,
// strides = dim. QK-norm in a fused qkv buffer: dim = head_dim, the strides the
// qkv row width. y may equal x (in place). weight has `dim` bf16 values.
// REQUIRES: dim <= 8192.
absl::Status RmsNorm(const Bf16* x, int64_t x_row_stride, int64_t n, int num_heads, int dim,
                     const Bf16* weight, float eps, Bf16* y, int64_t y_row_stride,
                     StreamHandle stream);

// y[n, dim] = (x - mean) / sqrt(var + eps) * weight + bias (biased variance),
// rows dense. y may equal x.
absl::Status LayerNorm(const Bf16* x, int64_t n, int dim, const Bf16* weight, const Bf16* bias,
                       float eps, Bf16* y, StreamHandle stream);

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_OPS_CUDA_NORM_H_
