// ExpertSkipping: MoDES dual-threshold expert skipping (paper 001, seeds/),
// the rule a MoE layer applies to its routing before any expert is fetched or
// computed.
//
// Paper 001, GMLG: the importance of routed expert i of a token at layer l is
//   s_i(l) = alpha(l) * pi_i(l)
// where pi_i(l) is the token's routing probability of expert i as the model
// computes it for the combine (Qwen3-VL-MoE: softmax over all experts, top-k,
// renormalised over the k -- RouterResult::weights) and alpha(l) the layer's
// global factor (mean KL of the output when layer l is skipped; calibrated by
// vismoe-calibrate, engine/calibrate/skip_calibrator.h).
// Paper 001, DMT: expert i is skipped when s_i(l) < tau_t * I_t + tau_v * I_v,
// tau_text for text tokens, tau_visual for visual tokens. The kept experts keep
// their combine weights: the paper removes the skipped terms from the sum and
// does not renormalise the rest (a token may lose every expert; its MoE output
// is then zero and the residual passes through).
//
// Off (no ExpertSkipping given) is the exact path. With both thresholds 0
// nothing is skipped (alpha >= 0, pi >= 0, and s < 0 never holds).
//
// Thread safety: plain values and a pure function.
#ifndef VISMOE_ENGINE_CORE_EXPERT_SKIPPING_H_
#define VISMOE_ENGINE_CORE_EXPERT_SKIPPING_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/core/routing.h"

namespace vismoe {

// The token kinds DMT separates; also the index into ExpertSkipCounts.
enum class TokenModality { kText = 0, kVisual = 1 };
inline const char* ModalityName(TokenModality m) {
  return m == TokenModality::kText ? "text" : "visual";
}

struct ExpertSkipping {
  // alpha(l) per decoder layer (dense layers' entries unused); empty = 1 for
  // every layer (DMT without GMLG).
  std::vector<float> alpha;
  float tau_text = 0.0f;
  float tau_visual = 0.0f;

  float Alpha(int layer) const { return alpha.empty() ? 1.0f : alpha[static_cast<size_t>(layer)]; }
};

// What the rule did: (token, slot) activations the router chose and those
// skipped, per TokenModality.
struct ExpertSkipCounts {
  uint64_t routed[2] = {0, 0};
  uint64_t skipped[2] = {0, 0};

  void Add(const ExpertSkipCounts& o) {
    for (int m = 0; m < 2; ++m) {
      routed[m] += o.routed[m];
      skipped[m] += o.skipped[m];
    }
  }
  uint64_t total_routed() const { return routed[0] + routed[1]; }
  uint64_t total_skipped() const { return skipped[0] + skipped[1]; }
};

// InvalidArgument naming the field at fault unless both thresholds are finite
// and >= 0 and alpha is empty or has `num_layers` finite values >= 0.
absl::Status ValidateExpertSkipping(const ExpertSkipping& rule, int num_layers);

// Applies the rule to rows [first, first + visual.size()) of `routing` (one
// sequence of a step; visual[i] != 0 when row first + i is a visual token) at
// decoder layer `layer`: marks routing->skipped (allocated on first use, [n,
// top_k]) and adds to `counts` (may be null).
// REQUIRES: routing->weights filled; layer < rule.alpha.size() unless empty.
void MarkSkippedExperts(const ExpertSkipping& rule, int layer, int64_t first,
                        absl::Span<const char> visual, RouterResult* routing,
                        ExpertSkipCounts* counts);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CORE_EXPERT_SKIPPING_H_
