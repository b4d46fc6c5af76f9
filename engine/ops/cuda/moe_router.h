// MoE router on device: softmax over each token's expert logits, top-k (ties:
// lower expert index first), optional renormalisation of the k weights. The
// semantics of cpu::Route after its logits GEMM (engine/ops/cpu/moe.h); the
// logits come from cuda::Gemm with an fp32 output.
#ifndef VISMOE_ENGINE_OPS_CUDA_MOE_ROUTER_H_
#define VISMOE_ENGINE_OPS_CUDA_MOE_ROUTER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/device/cuda/types.h"

namespace vismoe::cuda {

// logits [n, num_experts] fp32 -> experts [n, top_k] (by decreasing
// probability) and weights [n, top_k] fp32.
// REQUIRES (else InvalidArgument): 0 < top_k <= min(num_experts, 32),
// num_experts <= 1024.
absl::Status MoeRouterTopK(const float* logits, int64_t n, int num_experts, int top_k,
                           bool renormalize, int32_t* experts, float* weights, StreamHandle stream);

// GPT-OSS's router after its biased logits (cpu::RouteTopKSoftmax): the top_k
// largest logits (ties: lower index), then a softmax over those k, summed in
// slot order. A NaN logit is never picked; a token left with fewer than k
// pickable logits gets id num_experts in the rest (the caller checks ids).
// Same REQUIRES as MoeRouterTopK.
absl::Status MoeRouterTopKSoftmax(const float* logits, int64_t n, int num_experts, int top_k,
                                  int32_t* experts, float* weights, StreamHandle stream);

// PhiMoE's sparsemixer at inference (cpu::RouteSparseMixer after its logits):
// top-2, each pick the arg-max of the logits not yet taken (ties: lower
// index) weighted by a softmax over the logits within 2 * jitter_eps
// (relative) of it, the first pick masked for the second. experts / weights
// [n, 2]. REQUIRES (else InvalidArgument): 2 <= num_experts <= 1024.
absl::Status MoeRouterSparseMixer(const float* logits, int64_t n, int num_experts, float jitter_eps,
                                  int32_t* experts, float* weights, StreamHandle stream);

// DeepSeek's routers after their logits (cpu::RouteGroupSoftmax /
// cpu::RouteGroupSigmoid, engine/ops/cpu/group_router.h): softmax
// probabilities (V2) or sigmoid scores plus `bias` for the selection (V3,
// noaux_tc); with group limits (V3 always) the experts split into n_group
// groups, each scored by its largest selection score (softmax) or the sum of
// its two largest (sigmoid), and the experts outside the topk_group best
// groups (ties: lower group) masked to 0 (softmax) or -inf (sigmoid); the
// top_k selection scores (ties: lower index) pick the experts. Weights:
// softmax, the (masked) probability times `scale`; sigmoid, the unbiased
// score, divided by the slots' sum + 1e-20 when `normalize`, times `scale`.
struct GroupRouting {
  int top_k = 0;
  int n_group = 1, topk_group = 1;
  bool group_limited = false;  // softmax only: sigmoid always is
  bool sigmoid = false;
  const float* bias = nullptr;  // sigmoid: device fp32 [E] (e_score_correction_bias)
  bool normalize = false;       // sigmoid only, as the CPU op
  float scale = 1.0f;           // routed_scaling_factor
};
// REQUIRES (else InvalidArgument): MoeRouterTopK's and, where groups are
// scored (sigmoid or group_limited), n_group > 0 dividing num_experts,
// 0 < topk_group <= min(n_group, 32), and with sigmoid a bias and at least
// two experts per group.
absl::Status MoeRouterGroup(const float* logits, int64_t n, int num_experts, const GroupRouting& g,
                            int32_t* experts, float* weights, StreamHandle stream);

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_OPS_CUDA_MOE_ROUTER_H_
