#include "engine/policy/expert_skipping_options.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/policy_names.h"
#include "engine/core/status_macros.h"

namespace vismoe {
namespace {

// A threshold's value: the options' when set (>= 0), else the profile's.
absl::StatusOr<float> Threshold(float set, const std::optional<float>& calibrated,
                                const std::string& name) {
  if (set >= 0) return set;
  if (calibrated.has_value()) return *calibrated;
  return absl::InvalidArgumentError(absl::StrCat(
      name, " is not set and the calibration profile has no expert_skipping thresholds: set ", name,
      " or calibrate them with vismoe-calibrate --skip_target_rate"));
}

}  // namespace

absl::Status CheckExpertSkippingOptions(const ExpertSkippingOptions& options,
                                        const SkipOptionNames& names) {
  if (!PolicyFromName<SkipKind>(options.kind).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        names.kind, " \"", options.kind, "\" is not one of ", PolicyNames<SkipKind>(", ")));
  }
  if (!std::isfinite(options.tau_text)) {
    return absl::InvalidArgumentError(absl::StrCat(names.tau_text, " must be finite"));
  }
  if (!std::isfinite(options.tau_visual)) {
    return absl::InvalidArgumentError(absl::StrCat(names.tau_visual, " must be finite"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<ExpertSkipping>> ResolveExpertSkipping(
    const ExpertSkippingOptions& options, const SkipCalibration* calibrated, int num_layers,
    const SkipOptionNames& names) {
  VISMOE_RETURN_IF_ERROR(CheckExpertSkippingOptions(options, names));
  if (*PolicyFromName<SkipKind>(options.kind) == SkipKind::kNone) return std::nullopt;
  const SkipCalibration* cal = calibrated;
  ExpertSkipping rule;
  VISMOE_ASSIGN_OR_RETURN(
      rule.tau_text, Threshold(options.tau_text,
                               cal != nullptr ? std::optional<float>(cal->tau_text) : std::nullopt,
                               names.tau_text));
  VISMOE_ASSIGN_OR_RETURN(
      rule.tau_visual,
      Threshold(options.tau_visual,
                cal != nullptr ? std::optional<float>(cal->tau_visual) : std::nullopt,
                names.tau_visual));
  if (cal != nullptr) rule.alpha = cal->alpha;
  absl::Status valid = ValidateExpertSkipping(rule, num_layers);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(names.kind, ": ", valid.message()));
  }
  return rule;
}

}  // namespace vismoe
