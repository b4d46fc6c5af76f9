// The mlp-lookahead predictor's input x_l (VisMMOE Eq. 7), built the same way
// by the calibration trainer (from recorded traces) and by the runtime
// predictor (from the live forward pass), so the two can never drift apart.
// Thread safety: pure functions.
#ifndef VISMOE_ENGINE_POLICY_LOOKAHEAD_FEATURES_H_
#define VISMOE_ENGINE_POLICY_LOOKAHEAD_FEATURES_H_

#include <vector>

#include "absl/types/span.h"

namespace vismoe {

// x_l = [h_r(l); h_r(l-1); h_h(l); h_v]: the routing histogram of this MoE
// layer and of the previous one (zeros at the first; an empty span counts as
// zeros), the hidden state mean-pooled over the retained rows, and the static
// visual summary (empty for text-only models: the width is then 2E + H).
// REQUIRES: prev_histogram is empty or has histogram.size() entries.
std::vector<float> LookaheadFeatures(absl::Span<const float> histogram,
                                     absl::Span<const float> prev_histogram,
                                     absl::Span<const float> hidden_mean,
                                     absl::Span<const float> visual_summary);

// Feature width for a model: 2 * num_experts + hidden + (has_vision ? hidden : 0).
int LookaheadFeatureWidth(int num_experts, int hidden_size, bool has_vision);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_POLICY_LOOKAHEAD_FEATURES_H_
