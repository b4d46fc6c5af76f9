#include "engine/policy/history_predictor.h"

#include <algorithm>

namespace vismoe {

HistoryPredictor::HistoryPredictor(int num_layers, int num_experts, double decay)
    : num_layers_(std::max(0, num_layers)),
      num_experts_(std::max(0, num_experts)),
      decay_(decay),
      score_(static_cast<size_t>(num_layers_) * num_experts_, 0.0) {}

void HistoryPredictor::Observe(int layer, absl::Span<const int> experts) {
  if (layer < 0 || layer >= num_layers_) return;
  double* s = score_.data() + static_cast<size_t>(layer) * num_experts_;
  for (int e = 0; e < num_experts_; ++e) s[e] *= decay_;
  for (int e : experts) {
    if (e >= 0 && e < num_experts_) s[e] += 1.0;
  }
}

double HistoryPredictor::Score(int layer, int expert) const {
  if (layer < 0 || layer >= num_layers_ || expert < 0 || expert >= num_experts_) return 0;
  return score_[static_cast<size_t>(layer) * num_experts_ + expert];
}

std::vector<std::pair<int, double>> HistoryPredictor::Predict(int layer, int count) const {
  std::vector<std::pair<int, double>> out;
  if (layer < 0 || layer >= num_layers_ || count <= 0) return out;
  for (int e = 0; e < num_experts_; ++e) {
    const double s = Score(layer, e);
    if (s > 0) out.push_back({e, s});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (static_cast<int>(out.size()) > count) out.resize(count);
  return out;
}

}  // namespace vismoe
