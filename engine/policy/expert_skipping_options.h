// ExpertSkippingOptions: the engine's default MoDES expert skipping (paper
// 001; the rule is engine/core/expert_skipping.h) and how it meets a request's
// overrides and the calibration profile.
//
// A threshold < 0 means "not set here": it comes from the request, else the
// engine options, else the calibration profile (vismoe-calibrate's frontier
// search); alpha(l) always comes from the profile (GMLG), or is 1 for every
// layer when the profile has none. Skipping is lossy, so "none" is the
// default.
//
// Thread safety: plain values and pure functions.
#ifndef VISMOE_ENGINE_POLICY_EXPERT_SKIPPING_OPTIONS_H_
#define VISMOE_ENGINE_POLICY_EXPERT_SKIPPING_OPTIONS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "engine/core/expert_skipping.h"
#include "engine/policy/calibration_profile.h"

namespace vismoe {

struct ExpertSkippingOptions {
  std::string kind = "none";  // none | dual-threshold
  float tau_text = -1.0f;     // < 0: from the calibration profile
  float tau_visual = -1.0f;   // < 0: from the calibration profile
};

// The names errors use for the three settings ("expert_skipping",
// "skip_tau_text", "skip_tau_visual" for engine options; the server passes its
// flag names, a request "policy.expert_skipping", ...).
struct SkipOptionNames {
  std::string kind = "expert_skipping";
  std::string tau_text = "skip_tau_text";
  std::string tau_visual = "skip_tau_visual";
};

// InvalidArgument naming the setting unless `kind` is a SkipKind name and each
// threshold is finite (a negative one means "unset").
absl::Status CheckExpertSkippingOptions(const ExpertSkippingOptions& options,
                                        const SkipOptionNames& names);

// The rule `options` ask for: nullopt for "none"; otherwise thresholds from
// `options`, else from `calibrated` (the profile's expert_skipping section),
// and alpha from it (empty = 1 everywhere). InvalidArgument naming the setting
// when a threshold is set nowhere or the result is invalid for `num_layers`.
// `calibrated` may be null.
absl::StatusOr<std::optional<ExpertSkipping>> ResolveExpertSkipping(
    const ExpertSkippingOptions& options, const SkipCalibration* calibrated, int num_layers,
    const SkipOptionNames& names);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_POLICY_EXPERT_SKIPPING_OPTIONS_H_
