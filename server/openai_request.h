// The OpenAI Chat Completions request body (POST /v1/chat/completions) as
// the server's own request: a v1::GenerateRequest, which then takes exactly
// the gRPC path (validation, scheduler, engine). docs: server/openai_api.md.
//
// Accepted: `model`, `messages` (roles system / developer / user /
// assistant; content a string, null for an assistant turn, or an array of
// `text` and `image_url` parts, images as base64 `data:` URIs of PNG, JPEG
// or WebP), `max_tokens` / `max_completion_tokens`, `temperature`, `top_p`,
// `seed`, `stop`, `stream`, `stream_options.include_usage`, `n` = 1, and the
// server's own knobs in the `vismoe` object. Features the server cannot
// honour (n > 1, tools, logprobs, penalties, logit_bias, a JSON response
// format) are refused when asked for, never ignored; other unknown fields are
// ignored, as other OpenAI-compatible servers do. Remote image URLs are
// refused: fetching them would let any client make the server connect
// anywhere.
//
// Every error is InvalidArgument naming the field ("messages[1].content[0]
// .image_url.url: ...").
//
// Thread safety: stateless free function.
#ifndef VISMOE_SERVER_OPENAI_REQUEST_H_
#define VISMOE_SERVER_OPENAI_REQUEST_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "vismoe/v1/inference.pb.h"

namespace vismoe::server {

struct ChatCompletionRequest {
  v1::GenerateRequest request;
  std::string model;  // as the client named it; "" when absent
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

absl::StatusOr<ChatCompletionRequest> ParseChatCompletionRequest(absl::string_view body);

}  // namespace vismoe::server

#endif  // VISMOE_SERVER_OPENAI_REQUEST_H_
