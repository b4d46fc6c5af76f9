// The OpenAI-compatible API's response bodies: a chat completion, the
// Server-Sent Events chunks of a streamed one, the model list and the error
// body, as JSON text. docs: server/openai_api.md.
//
// Every body carries the server's own details under "vismoe" (a
// v1.FinalResult as proto JSON: the detailed finish reason, visual token
// counts, timings, offload statistics), which OpenAI clients ignore.
//
// Thread safety: stateless free functions.
#ifndef VISMOE_SERVER_OPENAI_RESPONSE_H_
#define VISMOE_SERVER_OPENAI_RESPONSE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "vismoe/v1/inference.pb.h"

namespace vismoe::server {

// What every completion object of one request repeats.
struct CompletionHeader {
  std::string id;       // "chatcmpl-<request id>"
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// OpenAI's finish_reason: "stop" (end of sequence or a stop string),
// "length" (max tokens reached).
const char* OpenAiFinishReason(v1::FinishReason reason);

// POST /v1/chat/completions without streaming. A reasoning model's reasoning
// (GPT-OSS's analysis channel) goes in message.reasoning_content, as vLLM and
// DeepSeek's API put it, when there is any.
std::string ChatCompletionJson(const CompletionHeader& header, absl::string_view text,
                               const v1::FinalResult& final, absl::string_view reasoning = "");

// One SSE event ("data: {...}\n\n") of a streamed completion. The first
// carries role "assistant" (`first`), the last `final` (its finish reason and
// the "vismoe" details). With `include_usage` every chunk has "usage": null,
// as OpenAI sends it, and UsageEvent follows the last. Reasoning goes in
// delta.reasoning_content when there is any.
std::string ChunkEvent(const CompletionHeader& header, absl::string_view text, bool first,
                       const v1::FinalResult* final, bool include_usage,
                       absl::string_view reasoning = "");
// The usage chunk of stream_options.include_usage: no choices, the usage.
std::string UsageEvent(const CompletionHeader& header, const v1::FinalResult& final);
// The event of an error after the stream started, then OpenAI's end marker.
std::string ErrorEvent(const absl::Status& status);
inline constexpr absl::string_view kDoneEvent = "data: [DONE]\n\n";

// {"error": {"message", "type", "param": null, "code"}} for `status` sent
// with HTTP status `http_status`; code is the lower-case gRPC code name.
std::string ErrorJson(const absl::Status& status, int http_status);

// GET /v1/models: the one model this server serves.
std::string ModelListJson(absl::string_view model, int64_t created, int max_context_tokens);

}  // namespace vismoe::server

#endif  // VISMOE_SERVER_OPENAI_RESPONSE_H_
