// The API key check shared by the gRPC service and the HTTP API.
//
// Thread safety: stateless free function.
#ifndef VISMOE_SERVER_API_KEY_H_
#define VISMOE_SERVER_API_KEY_H_

#include "absl/strings/string_view.h"

namespace vismoe::server {

// True when `presented` equals the configured `key` (never for an empty
// key). Compares without an early exit, so the time taken does not reveal how
// much of a guessed key was right.
bool ApiKeyMatches(absl::string_view presented, absl::string_view key);

// The key of an "authorization: Bearer <key>" header value (scheme
// case-insensitive), or "" when the value is not of that form.
absl::string_view BearerToken(absl::string_view authorization);

}  // namespace vismoe::server

#endif  // VISMOE_SERVER_API_KEY_H_
