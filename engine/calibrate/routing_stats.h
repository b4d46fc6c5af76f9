// Routing statistics of a model's own forward passes, the figures issue #32
// matches synthetic routing against (published Qwen3-30B-A3B decode traces):
// per MoE layer, over a sequence of tokens in order,
//  - next-token repeat: the share of a token's top-k also in the previous
//    token's top-k (45% published);
//  - reuse distance: for each selection, how many tokens back the layer last
//    selected the same expert (median 2, 80% within 8 published; selections
//    never seen before are counted apart);
//  - LRU hit ratio of a per-layer cache of a fraction of the experts, after a
//    warm-up and during it (90.0-95.3% at 40% after 64 tokens published);
//  - Belady's hit ratio at the same size: the clairvoyant ceiling of any
//    eviction policy on the same trace;
//  - the same two for one cache shared by every layer (the engine's slab
//    cache), fed in execution order (token by token, layer by layer), sized as
//    the same share of all the layers' experts;
//  - spread: distinct experts per window of 64 tokens (visual tokens spread
//    wider than text ones in the VisMMOE paper's Figure 3);
//  - next-layer id agreement: the share of a token's top-k at one MoE layer
//    whose expert ids are again in its top-k at the next MoE layer (chance:
//    top_k / num_experts). A predictor that scores expert ids over the next
//    layers without knowing the layer (VisMMOE's MLP) relies on it.
// RoutingStatsRecorder collects the token sequences (an observer of the
// forward pass); RoutingStats computes the figures over any number of them.
// Thread safety: the recorder observes one forward thread; the rest are
// plain values and free functions.
#ifndef VISMOE_ENGINE_CALIBRATE_ROUTING_STATS_H_
#define VISMOE_ENGINE_CALIBRATE_ROUTING_STATS_H_

#include <cstdint>
#include <vector>

#include "engine/core/routing.h"
#include "nlohmann/json.hpp"

namespace vismoe {

// One layer's routing over a token sequence: [tokens][top_k] expert ids.
using LayerSequence = std::vector<std::vector<int>>;

// Each MoE layer's token sequence of one phase of one request: prefill rows
// in prompt order, or decode tokens in generation order.
class RoutingStatsRecorder final : public RouterObserver {
 public:
  RoutingStatsRecorder() = default;
  void OnRouting(Phase phase, int layer, const float* hidden, const RouterResult& routing) override;
  // Indexed by decoder layer; empty for layers without a MoE block.
  const std::vector<LayerSequence>& prefill() const { return prefill_; }
  const std::vector<LayerSequence>& decode() const { return decode_; }

 private:
  std::vector<LayerSequence> prefill_, decode_;
};

struct RoutingStatsOptions {
  int num_experts = 0;
  std::vector<double> cache_fractions = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6};
  int warmup_tokens = 64;
  int spread_window = 64;
};

struct CacheHits {
  double fraction = 0;        // of each layer's experts
  int64_t capacity = 0;       // experts per layer
  double lru_hit = 0;         // after the warm-up
  double lru_warmup_hit = 0;  // over the warm-up tokens
  double belady_hit = 0;      // after the warm-up, clairvoyant eviction
  // One cache of fraction x (layers x experts) slots for all layers of a
  // request, after the warm-up (0 without ComputeRoutingStats' `requests`).
  double shared_lru_hit = 0;
  double shared_belady_hit = 0;
};

struct RoutingStats {
  int64_t sequences = 0;  // (request, layer) sequences measured
  int64_t tokens = 0;     // tokens summed over them
  double next_token_repeat = 0;
  double reuse_median = 0;         // over selections seen before in the sequence
  double reuse_within_1 = 0;       // share of those at distance 1
  double reuse_within_8 = 0;       // ... within 8
  double first_use_share = 0;      // selections never seen before in their sequence
  double distinct_per_window = 0;  // mean distinct experts per spread_window tokens
  // Over consecutive MoE layers of the same request with the same tokens (0
  // without ComputeRoutingStats' `requests`).
  double next_layer_agreement = 0;
  double next_layer_agreement_chance = 0;  // top_k / num_experts
  std::vector<CacheHits> cache;
};

// Statistics over every sequence (each a layer of one request); sequences
// shorter than 2 tokens count for nothing. `requests`, when given, groups the
// same sequences by request (each request's layers in execution order) for
// the shared-cache figures.
// REQUIRES: options.num_experts > 0; every id in [0, num_experts).
RoutingStats ComputeRoutingStats(
    const std::vector<const LayerSequence*>& sequences, const RoutingStatsOptions& options,
    const std::vector<std::vector<const LayerSequence*>>& requests = {});

nlohmann::json RoutingStatsJson(const RoutingStats& stats);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_CALIBRATE_ROUTING_STATS_H_
