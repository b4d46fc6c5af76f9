#include "engine/core/expert_skipping.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace vismoe {

absl::Status ValidateExpertSkipping(const ExpertSkipping& rule, int num_layers) {
  auto bad_tau = [](const char* name, float v) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert skipping: ", name, " must be a finite value >= 0, got ", v));
  };
  if (!std::isfinite(rule.tau_text) || rule.tau_text < 0) return bad_tau("tau_text", rule.tau_text);
  if (!std::isfinite(rule.tau_visual) || rule.tau_visual < 0) {
    return bad_tau("tau_visual", rule.tau_visual);
  }
  if (rule.alpha.empty()) return absl::OkStatus();
  if (static_cast<int>(rule.alpha.size()) != num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("expert skipping: alpha has ", rule.alpha.size(),
                                                   " values, the model has ", num_layers,
                                                   " decoder layers"));
  }
  for (size_t l = 0; l < rule.alpha.size(); ++l) {
    if (!std::isfinite(rule.alpha[l]) || rule.alpha[l] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expert skipping: alpha[", l, "] must be a finite value >= 0, got ", rule.alpha[l]));
    }
  }
  return absl::OkStatus();
}

void MarkSkippedExperts(const ExpertSkipping& rule, int layer, int64_t first,
                        absl::Span<const char> visual, RouterResult* routing,
                        ExpertSkipCounts* counts) {
  const int k = routing->top_k;
  if (routing->skipped.empty()) routing->skipped.assign(routing->experts.size(), 0);
  const float alpha = rule.Alpha(layer);
  for (size_t i = 0; i < visual.size(); ++i) {
    const int64_t t = first + static_cast<int64_t>(i);
    const int m = visual[i] != 0 ? 1 : 0;
    const float tau = m == 1 ? rule.tau_visual : rule.tau_text;
    for (int j = 0; j < k; ++j) {
      // s_i(l) = alpha(l) * pi_i(l) < tau (paper 001, GMLG and DMT).
      const bool skip = alpha * routing->weights[t * k + j] < tau;
      routing->skipped[t * k + j] = skip ? 1 : 0;
      if (counts != nullptr) {
        ++counts->routed[m];
        if (skip) ++counts->skipped[m];
      }
    }
  }
}

}  // namespace vismoe
