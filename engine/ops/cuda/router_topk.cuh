// One warp routes one token: softmax over its router logits, top-k, optional
// renormalisation, with the same operations in the same order as cpu::Route
// (so the same bits). Shared by moe_router.cu (a warp per token) and
// moe_decode.cu's routing kernel (warps take tokens in turn). Device code only.
#ifndef VISMOE_ENGINE_OPS_CUDA_ROUTER_TOPK_CUH_
#define VISMOE_ENGINE_OPS_CUDA_ROUTER_TOPK_CUH_

#include <cstdint>

#include "engine/ops/cuda/kernel_utils.cuh"

namespace vismoe::cuda::detail {

// row: the token's [E] logits; p: the warp's [E] floats of shared memory;
// experts / weights: the token's [top_k] outputs, written by lane 0, by
// decreasing probability (ties: the lower index). An id of num_experts means
// no candidate compared (NaN probabilities from NaN/inf logits).
// REQUIRES: called by the whole warp.
__device__ __forceinline__ void WarpRouteToken(const float* row, int num_experts, int top_k,
                                               bool renormalize, float* p, int32_t* experts,
                                               float* weights) {
  const int lane = threadIdx.x % kWarp;
  float mx = -INFINITY;
  for (int e = lane; e < num_experts; e += kWarp) mx = fmaxf(mx, row[e]);
  mx = WarpMax(mx);
  float sum = 0.0f;
  for (int e = lane; e < num_experts; e += kWarp) {
    p[e] = expf(row[e] - mx);
    sum += p[e];
  }
  sum = WarpSum(sum);
  // Divide (not multiply by 1/sum) so each p matches cpu::Route bit for bit
  // given the same sum: ties and the top-k order then agree with the CPU.
  for (int e = lane; e < num_experts; e += kWarp) p[e] /= sum;
  __syncwarp();

  float picked_sum = 0.0f;
  for (int r = 0; r < top_k; ++r) {
    // Lane-local best (ties: lower index), then a warp arg-max.
    float best = -1.0f;
    int best_e = num_experts;
    for (int e = lane; e < num_experts; e += kWarp) {
      if (p[e] > best) {  // ascending e: keeps the lowest index among ties
        best = p[e];
        best_e = e;
      }
    }
    for (int o = kWarp / 2; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
      if (ob > best || (ob == best && oe < best_e)) {
        best = ob;
        best_e = oe;
      }
    }
    if (lane == 0) {
      // An out-of-range id is reported (the caller checks ids) but must not
      // index p, which would overwrite the next warp's row (or run past the
      // allocation).
      experts[r] = best_e;
      weights[r] = best;
      if (best_e < num_experts) p[best_e] = -2.0f;  // taken: below any probability
    }
    picked_sum += best;  // same order as cpu::Route's renormalisation sum
    __syncwarp();
  }
  if (renormalize && lane == 0) {
    for (int r = 0; r < top_k; ++r) weights[r] /= picked_sum;
  }
}

}  // namespace vismoe::cuda::detail

#endif  // VISMOE_ENGINE_OPS_CUDA_ROUTER_TOPK_CUH_
