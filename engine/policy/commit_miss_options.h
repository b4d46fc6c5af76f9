// CommitMissOptions: the engine's settings of the commit miss policy (paper
// 003; the rule is engine/core/commit_miss_policy.h, the design and measured
// table engine/policy/commit_miss_policy.md) and how they meet a request's
// overrides and the calibration profile.
//
// The miss policy itself is a name of MissPolicy ("fetch", the default and
// the exact path, or "commit"). A threshold < 0 means "not set here": it
// comes from the request, else the engine options, else the calibration
// profile (vismoe-calibrate --commit_target_rate). OWA is on when alpha1 > 0;
// its trigger range defaults to the paper's choice for a top-4 model
// (Qwen1.5-MoE: 2 to 3 correct of 4), generalised as [ceil(k/2), k - 1].
//
// Thread safety: plain values and pure functions.
#ifndef VISMOE_ENGINE_POLICY_COMMIT_MISS_OPTIONS_H_
#define VISMOE_ENGINE_POLICY_COMMIT_MISS_OPTIONS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "engine/core/commit_miss_policy.h"
#include "engine/policy/calibration_profile.h"

namespace vismoe {

struct CommitMissOptions {
  float threshold = -1.0f;   // certainty (nats); < 0: from the calibration profile
  float owa_alpha1 = 0.0f;   // > 0 turns OWA on (Eq. 5); 0 = off
  float owa_alpha2 = 1.0f;   // Eq. 6, > 0
  int owa_min_correct = -1;  // -1: ceil(top_k / 2)
  int owa_max_correct = -1;  // -1: top_k - 1
};

// The names errors use for the settings (engine options by default; the
// server passes its flag names, a request "policy.miss_policy", ...).
struct CommitOptionNames {
  std::string miss_policy = "miss_policy";
  std::string threshold = "commit_threshold";
  std::string owa_alpha1 = "commit_owa_alpha1";
  std::string owa_alpha2 = "commit_owa_alpha2";
};

// InvalidArgument naming the setting unless `miss_policy` is a MissPolicy name
// and every number is finite (a negative threshold means "unset"; alpha1 >=
// 0, alpha2 > 0; the trigger bounds >= 1 or -1).
absl::Status CheckCommitMissOptions(const std::string& miss_policy,
                                    const CommitMissOptions& options,
                                    const CommitOptionNames& names);

// The rule `miss_policy` asks for: nullopt for "fetch"; for "commit" the
// threshold from `options`, else from `calibrated` (may be null), OWA and its
// trigger range resolved for `top_k`. InvalidArgument naming the setting when
// the threshold is set nowhere or the rule is invalid.
absl::StatusOr<std::optional<CommitMissPolicy>> ResolveCommitMiss(
    const std::string& miss_policy, const CommitMissOptions& options,
    const CommitCalibration* calibrated, int top_k, const CommitOptionNames& names);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_POLICY_COMMIT_MISS_OPTIONS_H_
