#include "engine/policy/history_expert_predictor.h"

namespace vismoe {

void HistoryExpertPredictor::OnRouting(Phase /*phase*/, int layer, const float* /*hidden*/,
                                       const RouterResult& routing) {
  seen_.assign(num_experts_, 0);
  for (int e : routing.experts) {
    if (e >= 0 && e < num_experts_) seen_[e] = 1;
  }
  std::vector<int> distinct;
  for (int e = 0; e < num_experts_; ++e) {
    if (seen_[e]) distinct.push_back(e);
  }
  history_.Observe(layer, distinct);
}

}  // namespace vismoe
