// Device helpers shared by the .cu files of engine/ops/cuda: bf16 <-> fp32,
// warp and block reductions, grid sizing. Device code only.
#ifndef VISMOE_ENGINE_OPS_CUDA_KERNEL_UTILS_CUH_
#define VISMOE_ENGINE_OPS_CUDA_KERNEL_UTILS_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/device/cuda/types.h"

namespace vismoe::cuda::detail {

inline constexpr int kWarp = 32;

__device__ __forceinline__ float LoadBf16(const Bf16* p, int64_t i) {
  return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(p)[i]);
}
__device__ __forceinline__ void StoreBf16(Bf16* p, int64_t i, float v) {
  // Round to nearest even, as engine/core/dtype.h's FloatToBf16 does.
  reinterpret_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

// Eight bf16 (a 16-byte load) as floats: bf16 is the top half of an fp32.
__device__ __forceinline__ void Bf16x8ToFloat(const uint4& u, float* v) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(w[i] << 16);
    v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// Eight bf16 weights in one 16-byte load, streamed (each is read once).
__device__ __forceinline__ void LoadWeights8(const Bf16* p, float* v) {
  Bf16x8ToFloat(__ldcs(reinterpret_cast<const uint4*>(p)), v);
}

// Eight bf16 activations (read by every block of the layer: cached).
__device__ __forceinline__ void LoadActs8(const Bf16* p, float* v) {
  Bf16x8ToFloat(__ldg(reinterpret_cast<const uint4*>(p)), v);
}

__device__ __forceinline__ void LoadActs8(const float* p, float* v) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p));
  const float4 b = __ldg(reinterpret_cast<const float4*>(p + 4));
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block; every thread gets the result. `scratch` holds >= 32 floats.
// REQUIRES: blockDim.x is a multiple of 32; called by all threads of the block.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int nwarps = blockDim.x / kWarp;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : 0.0f;
  return WarpSum(v);
}
__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int nwarps = blockDim.x / kWarp;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : -INFINITY;
  return WarpMax(v);
}

inline unsigned GridFor(int64_t n, int threads, int64_t max_blocks = 65535LL * 16) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return static_cast<unsigned>(b);
}

}  // namespace vismoe::cuda::detail

#endif  // VISMOE_ENGINE_OPS_CUDA_KERNEL_UTILS_CUH_
