#include "engine/policy/commit_miss_options.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/policy_names.h"
#include "engine/core/status_macros.h"

namespace vismoe {

absl::Status CheckCommitMissOptions(const std::string& miss_policy,
                                    const CommitMissOptions& options,
                                    const CommitOptionNames& names) {
  if (!PolicyFromName<MissPolicy>(miss_policy).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        names.miss_policy, " \"", miss_policy, "\" is not one of ", PolicyNames<MissPolicy>(", ")));
  }
  if (!std::isfinite(options.threshold)) {
    return absl::InvalidArgumentError(absl::StrCat(names.threshold, " must be finite"));
  }
  // NaN fails both comparisons.
  if (!(options.owa_alpha1 >= 0 && options.owa_alpha1 <= kMaxOwaAlpha)) {
    return absl::InvalidArgumentError(absl::StrCat(names.owa_alpha1, " must be in [0, ",
                                                   kMaxOwaAlpha,
                                                   "] (0 = OWA off; the paper's values "
                                                   "are near 1), got ",
                                                   options.owa_alpha1));
  }
  if (!(options.owa_alpha2 > 0 && options.owa_alpha2 <= kMaxOwaAlpha)) {
    return absl::InvalidArgumentError(absl::StrCat(names.owa_alpha2, " must be in (0, ",
                                                   kMaxOwaAlpha, "], got ", options.owa_alpha2));
  }
  for (int bound : {options.owa_min_correct, options.owa_max_correct}) {
    if (bound < 1 && bound != -1) {
      return absl::InvalidArgumentError(
          absl::StrCat("the OWA trigger bounds must be >= 1, or -1 for the default, got ", bound));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<CommitMissPolicy>> ResolveCommitMiss(
    const std::string& miss_policy, const CommitMissOptions& options,
    const CommitCalibration* calibrated, int top_k, const CommitOptionNames& names) {
  VISMOE_RETURN_IF_ERROR(CheckCommitMissOptions(miss_policy, options, names));
  if (*PolicyFromName<MissPolicy>(miss_policy) != MissPolicy::kCommit) return std::nullopt;
  CommitMissPolicy rule;
  if (options.threshold >= 0) {
    rule.threshold = options.threshold;
  } else if (calibrated != nullptr) {
    rule.threshold = calibrated->threshold;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        names.threshold,
        " is not set and the calibration profile has no commit_miss threshold: "
        "set ",
        names.threshold, " or calibrate it with vismoe-calibrate --commit_target_rate"));
  }
  rule.owa_alpha1 = options.owa_alpha1;
  rule.owa_alpha2 = options.owa_alpha2;
  rule.owa_min_correct = options.owa_min_correct > 0 ? options.owa_min_correct : (top_k + 1) / 2;
  rule.owa_max_correct = options.owa_max_correct > 0 ? options.owa_max_correct : top_k - 1;
  absl::Status valid = ValidateCommitMissPolicy(rule, top_k);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(names.miss_policy, ": ", valid.message()));
  }
  return rule;
}

}  // namespace vismoe
