#include "engine/policy/lookahead_features.h"

#include <cassert>

namespace vismoe {

std::vector<float> LookaheadFeatures(absl::Span<const float> histogram,
                                     absl::Span<const float> prev_histogram,
                                     absl::Span<const float> hidden_mean,
                                     absl::Span<const float> visual_summary) {
  assert(prev_histogram.empty() || prev_histogram.size() == histogram.size());
  std::vector<float> x;
  x.reserve(2 * histogram.size() + hidden_mean.size() + visual_summary.size());
  x.insert(x.end(), histogram.begin(), histogram.end());
  if (prev_histogram.empty()) {
    x.insert(x.end(), histogram.size(), 0.0f);
  } else {
    x.insert(x.end(), prev_histogram.begin(), prev_histogram.end());
  }
  x.insert(x.end(), hidden_mean.begin(), hidden_mean.end());
  x.insert(x.end(), visual_summary.begin(), visual_summary.end());
  return x;
}

int LookaheadFeatureWidth(int num_experts, int hidden_size, bool has_vision) {
  return 2 * num_experts + hidden_size + (has_vision ? hidden_size : 0);
}

}  // namespace vismoe
