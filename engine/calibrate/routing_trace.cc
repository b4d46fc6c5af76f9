#include "engine/calibrate/routing_trace.h"

#include <algorithm>

#include "engine/core/commit_miss_policy.h"
#include "engine/policy/decayed_target.h"
#include "engine/policy/lookahead_features.h"
#include "engine/policy/token_compressor.h"

namespace vismoe {

void RoutingTraceRecorder::OnRouting(Phase phase, int layer, const float* hidden,
                                     const RouterResult& r) {
  if (steps_.empty() || steps_.back().layers.empty() ||
      layer <= steps_.back().layers.back().layer) {
    steps_.push_back(StepRecord{phase, {}});
  }
  LayerRecord rec;
  rec.layer = layer;
  rec.histogram.assign(r.num_experts, 0.0f);
  rec.hidden_mean.assign(hidden_size_, 0.0f);
  for (int64_t t = 0; t < r.n; ++t) {
    for (int j = 0; j < r.top_k; ++j) rec.histogram[r.experts[t * r.top_k + j]] += 1.0f;
    for (int d = 0; d < hidden_size_; ++d) rec.hidden_mean[d] += hidden[t * hidden_size_ + d];
  }
  const float inv = r.n > 0 ? 1.0f / static_cast<float>(r.n) : 0.0f;
  for (int e = 0; e < r.num_experts; ++e) {
    if (rec.histogram[e] > 0) rec.experts.push_back(e);
    rec.histogram[e] *= inv;
  }
  for (float& v : rec.hidden_mean) v *= inv;
  if (r.logits.size() == static_cast<size_t>(r.n * r.num_experts)) {
    for (int64_t t = 0; t < r.n; ++t) {
      rec.certainty.push_back(
          static_cast<float>(RouterCertainty(r.logits.data() + t * r.num_experts, r.num_experts)));
    }
  }
  steps_.back().layers.push_back(std::move(rec));
}

void RoutingTraceRecorder::OnMoeOutput(Phase /*phase*/, int layer, const float* out, int64_t n) {
  if (layer < 0) return;
  if (static_cast<size_t>(layer) >= moe_sum_.size()) {
    moe_sum_.resize(layer + 1);
    moe_rows_.resize(layer + 1, 0);
  }
  std::vector<double>& sum = moe_sum_[layer];
  if (sum.empty()) sum.assign(hidden_size_, 0.0);
  for (int64_t t = 0; t < n; ++t) {
    for (int d = 0; d < hidden_size_; ++d) sum[d] += out[t * hidden_size_ + d];
  }
  moe_rows_[layer] += n;
}

void RoutingTraceRecorder::OnVisualSummary(absl::Span<const float> summary) {
  visual_summary_.assign(summary.begin(), summary.end());
}

std::vector<LookaheadExample> BuildLookaheadExamples(const std::vector<StepRecord>& steps,
                                                     Phase phase,
                                                     absl::Span<const float> visual_summary,
                                                     int window, float gamma) {
  std::vector<LookaheadExample> out;
  for (size_t s = 0; s < steps.size(); ++s) {
    const StepRecord& step = steps[s];
    if (step.phase != phase) continue;
    std::vector<std::vector<int>> activated;
    for (const LayerRecord& l : step.layers) activated.push_back(l.experts);
    for (size_t m = 0; m + 1 < step.layers.size(); ++m) {
      const LayerRecord& cur = step.layers[m];
      const int e = static_cast<int>(cur.histogram.size());
      LookaheadExample ex;
      ex.step = static_cast<int>(s);
      ex.moe_index = static_cast<int>(m);
      ex.sample.x = LookaheadFeatures(
          cur.histogram,
          m > 0 ? absl::MakeConstSpan(step.layers[m - 1].histogram) : absl::Span<const float>(),
          cur.hidden_mean, visual_summary);
      ex.sample.target = DecayedTarget(activated, static_cast<int>(m), window, gamma, e);
      ex.next_experts = step.layers[m + 1].experts;
      out.push_back(std::move(ex));
    }
  }
  return out;
}

double HotRecallAtB(absl::Span<const float> scores, absl::Span<const int> actual, int b) {
  if (actual.empty()) return 1.0;
  std::vector<int64_t> top = TopKIndices(scores, b);
  int hit = 0;
  for (int e : actual) hit += std::find(top.begin(), top.end(), e) != top.end() ? 1 : 0;
  return static_cast<double>(hit) / static_cast<double>(actual.size());
}

}  // namespace vismoe
