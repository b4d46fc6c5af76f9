// RMSNorm of the CPU reference backend, in the order of operations transformers
// uses (Qwen3 / Llama RMSNorm): x in fp32, variance = mean(x^2),
// y = x * rsqrt(variance + eps), then weight * y.
#ifndef VISMOE_ENGINE_OPS_CPU_RMS_NORM_H_
#define VISMOE_ENGINE_OPS_CPU_RMS_NORM_H_

#include <cstdint>

#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"

namespace vismoe::cpu {

// Normalises each of the n rows of x [n, dim] into y [n, dim]; y may equal x.
// Also used per attention head (n = tokens * heads, dim = head_dim).
// REQUIRES: weight has dim elements (F32, F16 or BF16).
void RmsNorm(ThreadPool* pool, const float* x, int64_t n, int64_t dim, const TensorView& weight,
             float eps, float* y);

}  // namespace vismoe::cpu

#endif  // VISMOE_ENGINE_OPS_CPU_RMS_NORM_H_
