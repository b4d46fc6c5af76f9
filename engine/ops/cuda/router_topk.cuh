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
// experts / weights: the token's [top_k] outputs, by decreasing probability
// (ties: the lower index), written by lanes 0..top_k-1 (lane r: slot r). An
// id of num_experts means no candidate compared (NaN probabilities from
// NaN/inf logits). Returns lane r's expert id (-1 on lanes >= top_k), so a
// caller needs no read back of what was just written to global memory (each
// such read is a round trip to L2; lane 0 doing them one after another was
// most of the routing kernel's time).
// REQUIRES: called by the whole warp; top_k <= 32.
__device__ __forceinline__ int WarpRouteToken(const float* row, int num_experts, int top_k,
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
  int my_e = -1;  // lane r keeps slot r
  float my_w = 0.0f;
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
    if (lane == r) my_e = best_e, my_w = best;
    // An out-of-range id is reported (the caller checks ids) but must not
    // index p, which would overwrite the next warp's row (or run past the
    // allocation).
    if (lane == 0 && best_e < num_experts) p[best_e] = -2.0f;  // taken: below any probability
    picked_sum += best;  // same order as cpu::Route's renormalisation sum
    __syncwarp();
  }
  if (lane < top_k) {
    experts[lane] = my_e;
    weights[lane] = renormalize ? my_w / picked_sum : my_w;
  }
  return my_e;
}

}  // namespace vismoe::cuda::detail

#endif  // VISMOE_ENGINE_OPS_CUDA_ROUTER_TOPK_CUH_
