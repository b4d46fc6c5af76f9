// Element-wise activations of the CPU reference backend (fp32), written to
// match PyTorch's definitions: silu(x) = x * sigmoid(x); GELU with the tanh
// approximation ("gelu_pytorch_tanh") and the exact erf form ("gelu").
#ifndef VISMOE_ENGINE_OPS_CPU_ACTIVATIONS_H_
#define VISMOE_ENGINE_OPS_CPU_ACTIVATIONS_H_

#include <cstdint>

#include "engine/core/thread_pool.h"

namespace vismoe::cpu {

float Silu(float x);
float GeluTanh(float x);
float GeluErf(float x);

// In place over x[0, n). `pool` may be null (runs inline).
void SiluInPlace(ThreadPool* pool, float* x, int64_t n);
void GeluTanhInPlace(ThreadPool* pool, float* x, int64_t n);
void GeluErfInPlace(ThreadPool* pool, float* x, int64_t n);

// SwiGLU combine: out[i] = silu(gate[i]) * up[i] for i < n. out may alias gate.
void SiluMul(const float* gate, const float* up, int64_t n, float* out);

}  // namespace vismoe::cpu

#endif  // VISMOE_ENGINE_OPS_CPU_ACTIVATIONS_H_
