// Internal to engine/ops/cpu: the vector primitives attention runs per
// (query, key) pair, one per kernel path (attention.cc picks one with
// ActiveKernelPath()). Each is a fixed sequence of operations for a given n,
// so a query row's result does not depend on the other rows of the call; the
// two paths differ in rounding (the AVX2 path fuses multiply-adds).
//   Dot: a . b over n floats. Portable: Dot (dot.h). AVX2: two eight-lane
//   accumulators, chunk c of eight into accumulator c % 2, (a0 + a1) reduced
//   as matmul_kernels.h's lanes, then the tail (n % 8) added in order.
//   Axpy: y[t] += alpha * x[t] for t < n, one rounding per element (AVX2,
//   fma) or two (portable: Axpy in dot.h).
// Thread safety: pure functions of their arguments.
#ifndef VISMOE_ENGINE_OPS_CPU_VECTOR_KERNELS_H_
#define VISMOE_ENGINE_OPS_CPU_VECTOR_KERNELS_H_

#include <cstdint>

namespace vismoe::cpu::internal {

float DotAvx2(const float* a, const float* b, int64_t n);
void AxpyAvx2(float alpha, const float* x, float* y, int64_t n);

}  // namespace vismoe::cpu::internal

#endif  // VISMOE_ENGINE_OPS_CPU_VECTOR_KERNELS_H_
