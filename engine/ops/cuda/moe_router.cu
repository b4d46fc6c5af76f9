#include "absl/strings/str_cat.h"
#include "engine/device/cuda/cuda_status.h"
#include "engine/ops/cuda/kernel_utils.cuh"
#include "engine/ops/cuda/moe_router.h"
#include "engine/ops/cuda/router_topk.cuh"

namespace vismoe::cuda {
namespace {

using detail::kWarp;
using detail::WarpRouteToken;

constexpr int kWarpsPerBlock = 4;

// One warp per token; probabilities in shared memory ([warps][E] floats).
__global__ void RouterKernel(const float* logits, int64_t n, int num_experts, int top_k,
                             bool renormalize, int32_t* experts, float* weights) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / kWarp;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (t >= n) return;  // whole warp leaves together: no block barrier below
  WarpRouteToken(logits + t * num_experts, num_experts, top_k, renormalize,
                 smem + warp * num_experts, experts + t * top_k, weights + t * top_k);
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
