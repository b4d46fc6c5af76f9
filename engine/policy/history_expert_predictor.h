// HistoryExpertPredictor: the "history" ExpertPredictor (DESIGN.md): a
// HistoryPredictor (decayed activation frequency per (layer, expert)) fed
// with the distinct experts each MoE layer routes to. It has no lookahead
// window: it answers for any MoE layer from what that layer did before.
// Thread safety: none (see ExpertPredictor). Ownership: plain value.
#ifndef VISMOE_ENGINE_POLICY_HISTORY_EXPERT_PREDICTOR_H_
#define VISMOE_ENGINE_POLICY_HISTORY_EXPERT_PREDICTOR_H_

#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "engine/offload/expert_predictor.h"
#include "engine/policy/history_predictor.h"

namespace vismoe {

class HistoryExpertPredictor final : public ExpertPredictor {
 public:
  // REQUIRES: 0 < decay <= 1.
  HistoryExpertPredictor(int num_layers, int num_experts, double decay)
      : history_(num_layers, num_experts, decay), num_experts_(num_experts) {}
  HistoryExpertPredictor(const HistoryExpertPredictor&) = delete;
  HistoryExpertPredictor& operator=(const HistoryExpertPredictor&) = delete;

  const char* name() const override { return "history"; }
  // History is learned across requests: nothing to drop.
  void BeginRequest() override {}
  std::vector<std::pair<int, double>> Predict(int target, int count) override {
    return history_.Predict(target, count);
  }
  void OnRouting(Phase phase, int layer, const float* hidden,
                 const RouterResult& routing) override;

  // Records that `layer` routed to the distinct `experts` (what OnRouting does
  // with a router result; also for drivers without a forward pass).
  void Observe(int layer, absl::Span<const int> experts) { history_.Observe(layer, experts); }

 private:
  HistoryPredictor history_;
  int num_experts_;
  std::vector<char> seen_;  // scratch: expert routed by some row
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_POLICY_HISTORY_EXPERT_PREDICTOR_H_
