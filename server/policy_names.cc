#include "server/policy_names.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/policy_names.h"

namespace vismoe::server {
namespace {

template <typename Kind>
absl::Status Check(absl::string_view field, absl::string_view name) {
  if (PolicyFromName<Kind>(name).has_value()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown ", field, " \"", name, "\"; valid: ", PolicyNames<Kind>(", ")));
}

}  // namespace

absl::Status ValidateTokenCompressorName(absl::string_view field, absl::string_view name) {
  return Check<CompressorKind>(field, name);
}

absl::Status ValidateExpertPredictorName(absl::string_view field, absl::string_view name) {
  return Check<PredictorKind>(field, name);
}

absl::Status ValidateExpertSkippingName(absl::string_view field, absl::string_view name) {
  return Check<SkipKind>(field, name);
}

absl::Status ValidateMissPolicyName(absl::string_view field, absl::string_view name) {
  return Check<MissPolicy>(field, name);
}

}  // namespace vismoe::server
