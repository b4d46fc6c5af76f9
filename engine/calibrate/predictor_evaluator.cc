#include "engine/calibrate/predictor_evaluator.h"

#include <algorithm>
#include <utility>

#include "engine/core/commit_miss_policy.h"

namespace vismoe {

double RecallTally::Recall(int phase) const {
  return needed[phase] > 0 ? static_cast<double>(hits[phase]) / needed[phase] : 0.0;
}

double RecallTally::Overall() const {
  const int64_t n = needed[0] + needed[1];
  return n > 0 ? static_cast<double>(hits[0] + hits[1]) / n : 0.0;
}

double CertaintyTally::MeanCertainty(int correct) const {
  const size_t c = static_cast<size_t>(correct);
  return c < tokens.size() && tokens[c] > 0 ? certainty_sum[c] / static_cast<double>(tokens[c])
                                            : 0.0;
}

PredictorEvaluator::PredictorEvaluator(std::unique_ptr<ExpertPredictor> predictor,
                                       std::vector<int> moe_layers, int b, int num_layers)
    : predictor_(std::move(predictor)),
      moe_layers_(std::move(moe_layers)),
      b_(b),
      per_layer_(num_layers) {}

void PredictorEvaluator::BeginRequest() {
  predictor_->BeginRequest();
  pending_layer_ = -1;
  last_layer_ = -1;
}

void PredictorEvaluator::OnRouting(Phase phase, int layer, const float* hidden,
                                   const RouterResult& routing) {
  if (layer <= last_layer_) pending_layer_ = -1;  // a new step: no carried prediction
  last_layer_ = layer;
  if (pending_layer_ == layer) Score(phase, layer, routing);
  predictor_->OnRouting(phase, layer, hidden, routing);
  auto next = std::upper_bound(moe_layers_.begin(), moe_layers_.end(), layer);
  pending_layer_ = -1;
  if (next == moe_layers_.end()) return;
  pending_layer_ = *next;
  pending_.clear();
  for (const auto& [expert, score] : predictor_->Predict(*next, b_)) {
    if (static_cast<int>(pending_.size()) < b_) pending_.push_back(expert);
  }
}

void PredictorEvaluator::OnPostAttention(Phase phase, int layer, const float* residual, int64_t n) {
  predictor_->OnPostAttention(phase, layer, residual, n);
}

void PredictorEvaluator::OnMoeOutput(Phase phase, int layer, const float* out, int64_t n) {
  predictor_->OnMoeOutput(phase, layer, out, n);
}

void PredictorEvaluator::OnVisualSummary(absl::Span<const float> summary) {
  predictor_->OnVisualSummary(summary);
}

void PredictorEvaluator::Score(Phase phase, int layer, const RouterResult& r) {
  std::vector<char> active(r.num_experts, 0);
  for (int e : r.experts) {
    if (e >= 0 && e < r.num_experts) active[e] = 1;
  }
  int needed = 0, hits = 0;
  for (int e = 0; e < r.num_experts; ++e) needed += active[e];
  for (int e : pending_) hits += (e >= 0 && e < r.num_experts && active[e]) ? 1 : 0;
  const int p = static_cast<int>(phase);
  if (phase == Phase::kDecode) ScoreCertainty(r);
  tally_.hits[p] += hits;
  tally_.needed[p] += needed;
  if (layer >= 0 && layer < static_cast<int>(per_layer_.size())) {
    per_layer_[layer].hits[p] += hits;
    per_layer_[layer].needed[p] += needed;
  }
}

void PredictorEvaluator::ScoreCertainty(const RouterResult& r) {
  if (r.logits.size() != static_cast<size_t>(r.n * r.num_experts)) return;
  const int k = r.top_k;
  if (certainty_.tokens.empty()) {
    certainty_.tokens.assign(static_cast<size_t>(k) + 1, 0);
    certainty_.certainty_sum.assign(static_cast<size_t>(k) + 1, 0.0);
  }
  const size_t top = std::min(pending_.size(), static_cast<size_t>(k));
  for (int64_t t = 0; t < r.n; ++t) {
    int correct = 0;
    for (size_t i = 0; i < top; ++i) {
      const int* row = r.experts.data() + t * k;
      correct += std::find(row, row + k, pending_[i]) != row + k ? 1 : 0;
    }
    ++certainty_.tokens[correct];
    certainty_.certainty_sum[correct] +=
        RouterCertainty(r.logits.data() + t * r.num_experts, r.num_experts);
  }
}

}  // namespace vismoe
