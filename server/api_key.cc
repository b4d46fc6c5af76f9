#include "server/api_key.h"

#include "absl/strings/match.h"

namespace vismoe::server {

bool ApiKeyMatches(absl::string_view presented, absl::string_view key) {
  if (key.empty()) return false;
  unsigned char diff = presented.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < presented.size(); ++i) diff |= presented[i] ^ key[i % key.size()];
  return diff == 0;
}

absl::string_view BearerToken(absl::string_view authorization) {
  constexpr absl::string_view kScheme = "bearer ";
  if (!absl::StartsWithIgnoreCase(authorization, kScheme)) return "";
  return authorization.substr(kScheme.size());
}

}  // namespace vismoe::server
