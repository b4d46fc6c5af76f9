// Element-wise bf16 ops of the CUDA backend, computed in fp32 and rounded to
// bf16 once: SwiGLU combine, GELU (tanh and exact erf, as
// engine/ops/cpu/activations.h), bias and residual adds, clamping.
#ifndef VISMOE_ENGINE_OPS_CUDA_ACTIVATIONS_H_
#define VISMOE_ENGINE_OPS_CUDA_ACTIVATIONS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/device/cuda/types.h"

namespace vismoe::cuda {

// out[i] = silu(gate[i]) * up[i], i < n. out may alias gate or up.
absl::Status SiluMul(const Bf16* gate, const Bf16* up, int64_t n, Bf16* out, StreamHandle stream);

// Fused expert layout: gate_up [rows, 2 * inter] (gate = first inter columns),
// out [rows, inter] = silu(gate) * up. out must not alias gate_up.
absl::Status SiluMulFused(const Bf16* gate_up, int64_t rows, int64_t inter, Bf16* out,
                          StreamHandle stream);

// GPT-OSS's experts: gate_up [rows, 2 * inter] with gate in the even and up
// in the odd columns, out [rows, inter] = (clamp(up, -limit, limit) + 1) *
// g * sigmoid(alpha * g), g = min(gate, limit) (cpu::ExpertForward's
// ClampedSwigluExpert path). out must not alias gate_up.
absl::Status ClampedSwigluInterleaved(const Bf16* gate_up, int64_t rows, int64_t inter, float alpha,
                                      float limit, Bf16* out, StreamHandle stream);

// In place over x[0, n).
absl::Status GeluTanh(Bf16* x, int64_t n, StreamHandle stream);
absl::Status GeluErf(Bf16* x, int64_t n, StreamHandle stream);

// y[r, c] += bias[c] for r < rows, c < cols.
absl::Status AddBias(Bf16* y, int64_t rows, int64_t cols, const Bf16* bias, StreamHandle stream);
// The same on fp32 rows with an fp32 bias (router logits).
absl::Status AddBiasF32(float* y, int64_t rows, int64_t cols, const float* bias,
                        StreamHandle stream);

// x[i] = clamp(x[i], -limit, limit) in place, i < n; NaN stays NaN (as
// std::clamp on the CPU: OLMoE's clip_qkv). REQUIRES: limit > 0.
absl::Status Clamp(Bf16* x, int64_t n, float limit, StreamHandle stream);

// out[i] = a[i] + b[i] (residual add); out may alias a or b.
absl::Status Add(const Bf16* a, const Bf16* b, int64_t n, Bf16* out, StreamHandle stream);

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_OPS_CUDA_ACTIVATIONS_H_
