#include "server/policy_names.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace vismoe::server {
namespace {

constexpr std::array<absl::string_view, 4> kTokenCompressors = {"none", "random", "saliency",
                                                                "affinity"};
constexpr std::array<absl::string_view, 4> kExpertPredictors = {
    "none", "history", "router-lookahead", "mlp-lookahead"};

template <size_t N>
absl::Status Check(absl::string_view field, absl::string_view name,
                   const std::array<absl::string_view, N>& valid) {
  for (absl::string_view v : valid) {
    if (v == name) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown ", field, " \"", name, "\"; valid: ", absl::StrJoin(valid, ", ")));
}

}  // namespace

absl::Status ValidateTokenCompressorName(absl::string_view field, absl::string_view name) {
  return Check(field, name, kTokenCompressors);
}

absl::Status ValidateExpertPredictorName(absl::string_view field, absl::string_view name) {
  return Check(field, name, kExpertPredictors);
}

}  // namespace vismoe::server
