#include "engine/ops/cpu/activations.h"

#include <cmath>

namespace vismoe::cpu {

float Silu(float x) { return x / (1.0f + std::exp(-x)); }

float GeluTanh(float x) {
  constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
  constexpr float kKappa = 0.044715f;
  const float inner = kBeta * (x + kKappa * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(inner));
}

float GeluErf(float x) {
  constexpr float kInvSqrt2 = 0.7071067811865476f;
  return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2));
}

namespace {

template <float (*F)(float)>
void Apply(ThreadPool* pool, float* x, int64_t n) {
  ParallelFor(pool, n, 4096, [x](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] = F(x[i]);
  });
}

}  // namespace

void SiluInPlace(ThreadPool* pool, float* x, int64_t n) { Apply<Silu>(pool, x, n); }
void GeluTanhInPlace(ThreadPool* pool, float* x, int64_t n) { Apply<GeluTanh>(pool, x, n); }
void GeluErfInPlace(ThreadPool* pool, float* x, int64_t n) { Apply<GeluErf>(pool, x, n); }

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = Silu(gate[i]) * up[i];
}

}  // namespace vismoe::cpu
