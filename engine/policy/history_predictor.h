// HistoryPredictor: the baseline expert predictor (DESIGN.md "history"): a
// decayed activation frequency per (layer, expert). Each time a layer routes,
// its experts' scores decay by `decay` and the routed ones gain 1, so recent
// and frequent experts rank first. Predict() gives the top-B experts of a
// layer, which the offload runtime prefetches one MoE layer ahead and, with
// the guarded eviction policy, uses as eviction priority.
// Thread safety: none; the owner serialises calls.
#ifndef VISMOE_ENGINE_POLICY_HISTORY_PREDICTOR_H_
#define VISMOE_ENGINE_POLICY_HISTORY_PREDICTOR_H_

#include <utility>
#include <vector>

#include "absl/types/span.h"

namespace vismoe {

class HistoryPredictor {
 public:
  // REQUIRES: 0 < decay <= 1, num_layers >= 0, num_experts >= 0.
  HistoryPredictor(int num_layers, int num_experts, double decay);

  // Records that `layer` routed to `experts` in this step. Out-of-range ids are ignored.
  void Observe(int layer, absl::Span<const int> experts);
  double Score(int layer, int expert) const;
  // Up to `count` (expert, score) pairs of `layer` with score > 0, highest
  // score first, ties to the lower id.
  std::vector<std::pair<int, double>> Predict(int layer, int count) const;

 private:
  int num_layers_;
  int num_experts_;
  double decay_;
  std::vector<double> score_;  // [layer * num_experts + expert]
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_POLICY_HISTORY_PREDICTOR_H_
