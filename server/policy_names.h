// The policy names a client or the operator may select (DESIGN.md, Policies).
// The server validates names here so a typo is rejected at the API boundary
// with the list of valid choices, before the request reaches the engine.
//
// Thread safety: stateless free functions.
#ifndef VISMOE_SERVER_POLICY_NAMES_H_
#define VISMOE_SERVER_POLICY_NAMES_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace vismoe::server {

// "none", "random", "saliency", "affinity".
absl::Status ValidateTokenCompressorName(absl::string_view field, absl::string_view name);
// "none", "history", "router-lookahead", "mlp-lookahead".
absl::Status ValidateExpertPredictorName(absl::string_view field, absl::string_view name);
// "none", "dual-threshold".
absl::Status ValidateExpertSkippingName(absl::string_view field, absl::string_view name);
// "fetch", "commit".
absl::Status ValidateMissPolicyName(absl::string_view field, absl::string_view name);

}  // namespace vismoe::server

#endif  // VISMOE_SERVER_POLICY_NAMES_H_
