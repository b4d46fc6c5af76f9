// Fuzzes the OpenAI-compatible API's request body (server/openai_request.h):
// the bytes are parsed as a chat completion request and, when that succeeds,
// validated with the server's default options, as the HTTP API does for each
// POST /v1/chat/completions. Every refusal must be InvalidArgument.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "server/openai_request.h"
#include "server/request_bytes.h"
#include "spdlog/spdlog.h"
#include "tests/fuzz/default_validator.h"

namespace vismoe::server {
namespace {

void Fuzz(absl::string_view body) {
  absl::StatusOr<ChatCompletionRequest> parsed = ParseChatCompletionRequest(body);
  if (!parsed.ok()) {
    if (!absl::IsInvalidArgument(parsed.status())) std::abort();
    return;
  }
  if (parsed->request.messages_size() == 0) std::abort();
  absl::StatusOr<ValidatedRequest> validated = DefaultValidator().Validate(parsed->request);
  if (!validated.ok() && !absl::IsInvalidArgument(validated.status())) std::abort();
}

}  // namespace
}  // namespace vismoe::server

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  vismoe::server::InstallProtobufLogRouting();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vismoe::server::Fuzz(absl::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
