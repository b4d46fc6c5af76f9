#include "absl/strings/str_cat.h"
#include "engine/device/cuda/cuda_status.h"
#include "engine/ops/cuda/kernel_utils.cuh"
#include "engine/ops/cuda/moe_router.h"

namespace vismoe::cuda {
namespace {

using detail::kWarp;
using detail::WarpMax;
using detail::WarpSum;

constexpr int kWarpsPerBlock = 4;

// One warp per token; probabilities in shared memory ([warps][E] floats).
__global__ void RouterKernel(const float* logits, int64_t n, int num_experts, int top_k,
                             bool renormalize, int32_t* experts, float* weights) {
  extern __shared__ float smem[];
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (t >= n) return;  // whole warp leaves together: no block barrier below
  float* p = smem + warp * num_experts;
  const float* row = logits + t * num_experts;

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
      // best_e == num_experts only when no candidate compares > -1 (NaN
      // probabilities from NaN/inf logits): the out-of-range id is reported
      // (the caller checks ids on the host), but must not be used to index p,
      // which would overwrite the next warp's row (or run past the allocation).
      experts[t * top_k + r] = best_e;
      weights[t * top_k + r] = best;
      if (best_e < num_experts) p[best_e] = -2.0f;  // taken: below any probability
    }
    picked_sum += best;  // same order as cpu::Route's renormalisation sum
    __syncwarp();
  }
  if (renormalize && lane == 0) {
    for (int r = 0; r < top_k; ++r) weights[t * top_k + r] /= picked_sum;
  }
}

}  // namespace

absl::Status MoeRouterTopK(const float* logits, int64_t n, int num_experts, int top_k,
                           bool renormalize, int32_t* experts, float* weights,
                           StreamHandle stream) {
  if (num_experts <= 0 || num_experts > 1024 || top_k <= 0 || top_k > num_experts || top_k > 32) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::MoeRouterTopK: num_experts=", num_experts,
                                                   " top_k=", top_k,
                                                   " (need 0 < top_k <= min(E, 32), E <= 1024)"));
  }
  if (n <= 0) return absl::OkStatus();
  const int64_t blocks = (n + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const size_t shmem = static_cast<size_t>(kWarpsPerBlock) * num_experts * sizeof(float);
  RouterKernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * kWarp, shmem, stream>>>(
      logits, n, num_experts, top_k, renormalize, experts, weights);
  VISMOE_CUDA_RETURN_IF_LAUNCH_ERROR("RouterKernel");
  return absl::OkStatus();
}

}  // namespace vismoe::cuda
