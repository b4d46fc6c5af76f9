// One streamed chat completion through the server's OpenAI-compatible HTTP
// API (server/openai_api.md), measured on the client side exactly as
// RunGenerate measures a gRPC call, so vismoe-load --api=openai compares the
// two front ends request for request.
#ifndef VISMOE_CLIENT_CHAT_COMPLETION_CALL_H_
#define VISMOE_CLIENT_CHAT_COMPLETION_CALL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/generate_call.h"
#include "nlohmann/json.hpp"
#include "vismoe/v1/inference.pb.h"

namespace vismoe::client {

struct HttpTarget {
  std::string host;
  int port = 0;
  std::string api_key;  // sent as "Authorization: Bearer <key>" when set
};

// "host:port" as a target; InvalidArgument otherwise.
absl::StatusOr<HttpTarget> ParseHttpTarget(const std::string& address);

// The OpenAI request body of `request`, streamed with usage: images as
// base64 data: URIs, top_k / policy / request_id under "vismoe".
nlohmann::json ChatCompletionBody(const vismoe::v1::GenerateRequest& request);

// Sends `request` and reads the event stream to its end within `timeout`.
// TTFT is the first chunk with text; the final result (usage, timings,
// offload) comes from the last chunk's "vismoe" object. An HTTP error or an
// error event becomes the matching gRPC status.
GenerateOutcome RunChatCompletion(const HttpTarget& target,
                                  const vismoe::v1::GenerateRequest& request,
                                  absl::Duration timeout);

}  // namespace vismoe::client

#endif  // VISMOE_CLIENT_CHAT_COMPLETION_CALL_H_
