// Policy-override and report-file helpers shared by vismoe-load and vismoe-eval.
#ifndef VISMOE_CLIENT_POLICY_FLAGS_H_
#define VISMOE_CLIENT_POLICY_FLAGS_H_

#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "vismoe/v1/inference.pb.h"

namespace vismoe::client {

// Builds overrides from flag-style values: empty strings and a negative
// keep_ratio mean "server default" (unset).
vismoe::v1::PolicyOverrides MakePolicyOverrides(const std::string& token_compressor,
                                                double keep_ratio,
                                                const std::string& expert_predictor);

// Adds the expert skipping overrides (MoDES): an empty `kind` and negative
// thresholds mean "server default" (unset); the server validates the values.
void AddSkippingOverrides(const std::string& kind, double tau_text, double tau_visual,
                          vismoe::v1::PolicyOverrides* policy);

// Adds the miss policy overrides (CommitMoE): an empty `miss_policy` and
// negative numbers mean "server default" (unset); alpha1 = 0 turns OWA off.
void AddMissPolicyOverrides(const std::string& miss_policy, double commit_threshold,
                            double owa_alpha1, double owa_alpha2,
                            vismoe::v1::PolicyOverrides* policy);

// The overrides as JSON for report configs (unset fields omitted).
nlohmann::json PolicyToJson(const vismoe::v1::PolicyOverrides& policy);

// Writes `value` (pretty-printed) to `path`; Internal naming the path on failure.
absl::Status WriteJsonFile(const std::string& path, const nlohmann::json& value);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_POLICY_FLAGS_H_
