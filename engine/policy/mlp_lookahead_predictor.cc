#include "engine/policy/mlp_lookahead_predictor.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/policy/lookahead_features.h"
#include "engine/policy/top_scores.h"

namespace vismoe {

absl::StatusOr<std::unique_ptr<MlpLookaheadPredictor>> MlpLookaheadPredictor::Create(
    const ModelConfig& config, MlpLookahead mlp, int window) {
  const TextConfig& c = config.text;
  const int width = LookaheadFeatureWidth(c.num_experts, c.hidden_size, config.has_vision);
  if (mlp.input_dim() != width) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mlp-lookahead: the calibrated MLP takes ", mlp.input_dim(), " features but this model (",
        c.num_experts, " experts, hidden ", c.hidden_size, config.has_vision ? ", vision" : "",
        ") needs ", width, "; recalibrate with vismoe-calibrate on this model"));
  }
  if (mlp.num_experts() != c.num_experts) {
    return absl::InvalidArgumentError(absl::StrCat("mlp-lookahead: the calibrated MLP scores ",
                                                   mlp.num_experts(), " experts, the model has ",
                                                   c.num_experts));
  }
  if (window < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("mlp-lookahead: lookahead window must be >= 1, got ", window));
  }
  std::unique_ptr<MlpLookaheadPredictor> p(new MlpLookaheadPredictor(std::move(mlp)));
  p->num_experts_ = c.num_experts;
  p->hidden_ = c.hidden_size;
  p->has_vision_ = config.has_vision;
  p->window_ = window;
  p->moe_index_.assign(c.num_hidden_layers, -1);
  int m = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    if (c.IsMoeLayer(l)) p->moe_index_[l] = m++;
  }
  p->BeginRequest();
  return p;
}

void MlpLookaheadPredictor::BeginRequest() {
  visual_.assign(has_vision_ ? hidden_ : 0, 0.0f);
  last_layer_ = -1;
  histogram_.clear();
  x_.clear();
  y_.clear();
}

void MlpLookaheadPredictor::OnVisualSummary(absl::Span<const float> summary) {
  if (has_vision_ && static_cast<int>(summary.size()) == hidden_) {
    visual_.assign(summary.begin(), summary.end());
  }
}

void MlpLookaheadPredictor::OnRouting(Phase /*phase*/, int layer, const float* hidden,
                                      const RouterResult& r) {
  if (layer < 0 || layer >= static_cast<int>(moe_index_.size()) || moe_index_[layer] < 0 ||
      r.num_experts != num_experts_) {
    return;
  }
  // The same accumulation as RoutingTraceRecorder, so features match training.
  std::vector<float> hist(num_experts_, 0.0f), mean(hidden_, 0.0f);
  for (int64_t t = 0; t < r.n; ++t) {
    for (int j = 0; j < r.top_k; ++j) hist[r.experts[t * r.top_k + j]] += 1.0f;
    for (int d = 0; d < hidden_; ++d) mean[d] += hidden[t * hidden_ + d];
  }
  const float inv = r.n > 0 ? 1.0f / static_cast<float>(r.n) : 0.0f;
  for (float& v : hist) v *= inv;
  for (float& v : mean) v *= inv;
  // A layer index that does not grow starts a new forward step: no previous layer.
  const bool same_step = last_layer_ >= 0 && layer > last_layer_;
  x_ = LookaheadFeatures(
      hist, same_step ? absl::MakeConstSpan(histogram_) : absl::Span<const float>(), mean, visual_);
  y_ = mlp_.Predict(x_);
  histogram_ = std::move(hist);
  last_layer_ = layer;
}

std::vector<std::pair<int, double>> MlpLookaheadPredictor::Predict(int target, int count) {
  if (last_layer_ < 0 || target < 0 || target >= static_cast<int>(moe_index_.size()) ||
      moe_index_[target] < 0) {
    return {};
  }
  const int ahead = moe_index_[target] - moe_index_[last_layer_];
  if (ahead < 1 || ahead > window_) return {};
  std::vector<double> score(y_.size());
  for (size_t e = 0; e < y_.size(); ++e) score[e] = 1.0 / (1.0 + std::exp(-double{y_[e]}));
  return TopScores(score, count);
}

}  // namespace vismoe
