// DeepSeek's routers on the CPU reference backend, as transformers'
// DeepseekV2TopkRouter / DeepseekV3TopkRouter compute them (fp32 logits
// x . W_g^T). Both can restrict the choice to groups of experts: the experts
// split into n_group equal groups, each group scored, and only the topk_group
// best groups' experts eligible.
//
// Thread safety: reentrant; the logits are split over `pool` (null: inline).
#ifndef VISMOE_ENGINE_OPS_CPU_GROUP_ROUTER_H_
#define VISMOE_ENGINE_OPS_CPU_GROUP_ROUTER_H_

#include <cstdint>

#include "engine/core/routing.h"
#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"

namespace vismoe::cpu {

// What selects and weighs the experts.
struct GroupRouting {
  int top_k = 0;
  int n_group = 1, topk_group = 1;
  bool group_limited = false;  // V3 always is
  bool normalize = false;      // V3: weights / (sum + 1e-20); V2 never
  float scale = 1;             // routed_scaling_factor, after normalising
};

// DeepSeek-V2: p = softmax(logits); with group limits a group scores its
// largest p and the experts outside the kept groups get p = 0; the top_k p
// (ties: lower index first) times `scale` are the weights.
void RouteGroupSoftmax(ThreadPool* pool, const float* x, int64_t n, int64_t hidden,
                       const TensorView& gate, const GroupRouting& g, RouterResult* out);

// DeepSeek-V3 (noaux_tc): s = sigmoid(logits); the selection scores s + bias
// (e_score_correction_bias [E]) score a group by the sum of its two largest,
// the experts outside the kept groups are -inf, and the top_k selection
// scores pick the experts; their weights are the unbiased s, normalised when
// g.normalize, times g.scale. REQUIRES: E / n_group >= 2.
void RouteGroupSigmoid(ThreadPool* pool, const float* x, int64_t n, int64_t hidden,
                       const TensorView& gate, const TensorView& bias, const GroupRouting& g,
                       RouterResult* out);

}  // namespace vismoe::cpu

#endif  // VISMOE_ENGINE_OPS_CPU_GROUP_ROUTER_H_
