// CommitMissPolicy: the "commit" miss policy of paper 003 (CommitMoE, seeds/),
// the rule a MoE layer applies to its routing, before any expert is declared
// to the provider, when some routed experts are neither resident nor in flight.
//
// Router certainty (paper 003, section 3): KL(softmax(router logits) || uniform)
// over all E experts of the layer, in nats: 0 for a uniform router, ln(E) for
// a one-hot one. A token whose certainty is below `threshold` (strict <) is
// uncertain: each of its routed experts that is neither resident nor in flight
// is replaced by an expert the predictor chose for this layer (paper 003's
// E_pred, recorded by the offload runtime when it prefetched for the layer)
// that is resident or in flight and not already among the token's experts --
// the candidates with the highest router probability for the token first. A
// missing expert with no candidate left is fetched as today. A certain token
// (certainty >= threshold) fetches as today: "commit where the router is
// uncertain, fetch where it is certain".
//
// Combine weights of a token with a substitute. With G(e) = p_e / Z, p the
// router softmax over all experts and Z the sum of p over the router's top-k
// when the model renormalises top-k (Qwen3-VL-MoE), else 1 -- the router's own
// weight scale -- and S the token's computed slots (the router's experts kept
// plus the substitutes):
//  - without OWA: w_j = p_j / sum_{S and skipped slots} p (renormalising
//    models), i.e. what the router's gating gives S had S been its top-k (a
//    token without a substitute keeps its weights bit for bit); else w_j = p_j.
//  - with OWA (paper 003, Eq. 5-6), when the token keeps c of its router's
//    experts with owa_min_correct <= c <= owa_max_correct ("accuracy high but
//    not perfect"): kept k: G'_k = G_k * (1 + sum_{replaced} G / sum_{kept} G)
//    * alpha1; substitute k: G'_k = G_k; then G''_k = G'_k * sum_{router's
//    non-skipped} G / sum_{S} G' * alpha2. Outside the trigger range the
//    weights are those without OWA.
// Skipped slots (MoDES, engine/core/expert_skipping.h) are neither missing
// nor replaced; they still add nothing.
//
// Off (no CommitMissPolicy given) is the fetch path, bit for bit. With
// threshold 0 nothing commits (KL >= 0 is never < 0); any threshold above
// ln(E) commits every token with a miss (the paper's unconditional commit).
//
// Thread safety: plain values and pure functions.
#ifndef VISMOE_ENGINE_CORE_COMMIT_MISS_POLICY_H_
#define VISMOE_ENGINE_CORE_COMMIT_MISS_POLICY_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/routing.h"

namespace vismoe {

// What an expert provider can say about one MoE layer before the layer
// declares its experts (ExpertProvider::Availability).
struct ExpertAvailability {
  // Every expert of the layer is usable without a copy (everything resident,
  // or a pinned-prefix layer): the rule has nothing to replace.
  bool all = false;
  // [num_experts]: 1 when the expert is resident or its copy is in flight, so
  // declaring it now would be a cache hit. Unused when `all`.
  std::vector<uint8_t> available;
  // The experts the predictor chose for this layer when the runtime
  // prefetched for it, best first (paper 003's E_pred); empty when it chose
  // none for this layer in this step.
  std::vector<int> predicted;

  bool Available(int expert) const {
    return all || (expert >= 0 && static_cast<size_t>(expert) < available.size() &&
                   available[static_cast<size_t>(expert)] != 0);
  }
};

struct CommitMissPolicy {
  // Certainty (nats) below which a token commits; 0 = never.
  float threshold = 0.0f;
  // Output Weight Adjustment (Eq. 5-6): on when alpha1 > 0.
  float owa_alpha1 = 0.0f;
  float owa_alpha2 = 1.0f;
  // OWA's trigger: the token keeps this many of its router's experts.
  int owa_min_correct = 1;
  int owa_max_correct = 1;

  bool owa() const { return owa_alpha1 > 0.0f; }
};

// Largest OWA alpha accepted: each scales the MoE output's gates (the paper's
// values are near 1); far beyond that the layer's output is meaningless, and
// near FLT_MAX the gates overflow to infinity.
inline constexpr float kMaxOwaAlpha = 16.0f;

// What the rule did, in (token, MoE layer) pairs and (token, slot) activations.
struct CommitCounts {
  uint64_t tokens = 0;            // pairs the rule looked at (layers with a non-resident expert)
  uint64_t uncertain_tokens = 0;  // of those, certainty < threshold
  // Activations of uncertain tokens computed with the router's own expert,
  // resident or in flight (committed, agreeing with the router).
  uint64_t committed_router = 0;
  // Activations whose missing expert a predicted one replaced (committed,
  // differing from the router): a copy avoided.
  uint64_t committed_substitute = 0;
  // Activations of uncertain tokens still fetched: no substitute was left.
  uint64_t fetched = 0;
  uint64_t owa_tokens = 0;  // tokens whose weights OWA adjusted

  void Add(const CommitCounts& o) {
    tokens += o.tokens;
    uncertain_tokens += o.uncertain_tokens;
    committed_router += o.committed_router;
    committed_substitute += o.committed_substitute;
    fetched += o.fetched;
    owa_tokens += o.owa_tokens;
  }
  uint64_t committed() const { return committed_router + committed_substitute; }
};

// KL(softmax(logits) || uniform) over `num_experts` logits, in nats, in
// [0, ln(num_experts)], computed in double and rounded to float: the value
// the rule compares with its threshold. REQUIRES: num_experts >= 1, finite
// logits.
float RouterCertainty(const float* logits, int num_experts);

// InvalidArgument naming the field at fault unless the threshold is finite
// and >= 0, alpha1 in [0, kMaxOwaAlpha], alpha2 in (0, kMaxOwaAlpha], and, with OWA on,
// 1 <= owa_min_correct <= owa_max_correct <= top_k - 1.
absl::Status ValidateCommitMissPolicy(const CommitMissPolicy& rule, int top_k);

// Applies the rule to rows [first, first + n) of `routing` (one sequence of a
// step) at a layer whose experts are as `avail` says: rewrites
// routing->experts and routing->weights of the tokens with a substitute,
// marks their replaced slots in routing->committed (allocated [n_all, top_k]
// on the first substitution) and adds to `counts` (may be null). Does nothing
// when avail.all. `renormalize`: the model renormalises its top-k weights.
// REQUIRES: routing->logits and weights filled (Route with_scores).
void CommitMisses(const CommitMissPolicy& rule, bool renormalize, const ExpertAvailability& avail,
                  int64_t first, int64_t n, RouterResult* routing, CommitCounts* counts);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CORE_COMMIT_MISS_POLICY_H_
