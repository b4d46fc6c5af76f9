// Routing: what a MoE layer's router decided for a step's tokens, and the
// observer interface through which the token compressor, the expert
// predictors and calibration watch the forward pass. Backend-neutral: every
// backend reports host copies in these types.
//
// Thread safety: RouterResult is a plain value; observers are called on the
// one thread running the forward step.
#ifndef VISMOE_ENGINE_CORE_ROUTING_H_
#define VISMOE_ENGINE_CORE_ROUTING_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/core/phase.h"

namespace vismoe {

// Routing of n tokens over E experts, top_k per token.
struct RouterResult {
  int64_t n = 0;
  int num_experts = 0;
  int top_k = 0;
  std::vector<float> logits;   // [n, E]: x . W_g^T
  std::vector<int> experts;    // [n, top_k], by decreasing probability
  std::vector<float> weights;  // [n, top_k], combine weights
  // [n, top_k]: 1 where expert skipping (engine/core/expert_skipping.h) drops
  // the slot -- its expert is neither fetched nor computed for the token and
  // adds nothing to its output. Empty = nothing skipped (the exact path).
  std::vector<uint8_t> skipped;
  // [n, top_k]: 1 where the commit miss policy (engine/core/commit_miss_policy.h)
  // replaced the router's expert of the slot by a resident or in-flight one;
  // experts and weights then differ from the router's (a token with such a
  // slot may have all its weights changed). Empty = the router's routing.
  std::vector<uint8_t> committed;
  // [n, top_k]: 1 where speculative execution (engine/core/speculative_execution.h)
  // computed the slot's expert for the token ahead, on the predicted input:
  // that output, times the slot's weight, is the slot's contribution, and
  // the expert is not computed again for the token. Empty = none.
  std::vector<uint8_t> speculative;

  bool IsSkipped(int64_t token, int slot) const {
    return !skipped.empty() && skipped[static_cast<size_t>(token * top_k + slot)] != 0;
  }
  bool IsSpeculative(int64_t token, int slot) const {
    return !speculative.empty() && speculative[static_cast<size_t>(token * top_k + slot)] != 0;
  }
};

// Sees each MoE layer's routing (the token compressor and the expert
// predictors use it). Called on the forward thread before the experts run.
class RouterObserver {
 public:
  virtual ~RouterObserver() = default;
  // `hidden` [n, hidden_size] is the MoE block's input (post-attention RMSNorm).
  virtual void OnRouting(Phase phase, int layer, const float* hidden,
                         const RouterResult& routing) = 0;
  // `residual` [n, hidden_size]: the residual stream after attention (the
  // post-attention RMSNorm's input) of MoE layer `layer`; called right before
  // OnRouting. The router-lookahead predictor builds the quasi-hidden state
  // (paper 004, section 3.2) from it.
  virtual void OnPostAttention(Phase /*phase*/, int /*layer*/, const float* /*residual*/,
                               int64_t /*n*/) {}
  // `out` [n, hidden_size]: MoE layer `layer`'s output, before the residual add
  // (calibration averages it into the layer's default vector d_l).
  virtual void OnMoeOutput(Phase /*phase*/, int /*layer*/, const float* /*out*/, int64_t /*n*/) {}
  // The request's static visual summary h_v (VisMMOE Eq. 6, [hidden_size]):
  // the engine calls it before prefill (mean over every visual token) and again
  // after compression (mean over the kept ones). Never called for text-only requests.
  virtual void OnVisualSummary(absl::Span<const float> /*summary*/) {}
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CORE_ROUTING_H_
