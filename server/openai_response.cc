#include "server/openai_response.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "server/status_mapping.h"

namespace vismoe::server {
namespace {

using nlohmann::json;

// Text from the client or the model: invalid UTF-8 (never expected) is
// replaced rather than allowed to throw.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json Usage(const v1::Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens()},
          {"completion_tokens", u.completion_tokens()},
          {"total_tokens", u.prompt_tokens() + u.completion_tokens()}};
}

// The server's own details: the FinalResult in proto JSON.
json Extension(const v1::FinalResult& final) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(final, &text, options).ok()) return nullptr;
  return json::parse(text, nullptr, /*allow_exceptions=*/false);
}

json Header(const CompletionHeader& h, const char* object) {
  return {{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

}  // namespace

const char* OpenAiFinishReason(v1::FinishReason reason) {
  return reason == v1::FINISH_REASON_LENGTH ? "length" : "stop";
}

std::string ChatCompletionJson(const CompletionHeader& header, absl::string_view text,
                               const v1::FinalResult& final, absl::string_view reasoning) {
  json body = Header(header, "chat.completion");
  json message = {{"role", "assistant"}, {"content", std::string(text)}};
  if (!reasoning.empty()) message["reasoning_content"] = std::string(reasoning);
  body["choices"] = json::array({{{"index", 0},
                                  {"message", message},
                                  {"logprobs", nullptr},
                                  {"finish_reason", OpenAiFinishReason(final.finish_reason())}}});
  body["usage"] = Usage(final.usage());
  body["vismoe"] = Extension(final);
  return Dump(body);
}

std::string ChunkEvent(const CompletionHeader& header, absl::string_view text, bool first,
                       const v1::FinalResult* final, bool include_usage,
                       absl::string_view reasoning) {
  json delta = json::object();
  if (first) delta["role"] = "assistant";
  if (!reasoning.empty()) delta["reasoning_content"] = std::string(reasoning);
  if (!text.empty() || first) delta["content"] = std::string(text);
  json chunk = Header(header, "chat.completion.chunk");
  chunk["choices"] = json::array(
      {{{"index", 0},
        {"delta", delta},
        {"logprobs", nullptr},
        {"finish_reason",
         final != nullptr ? json(OpenAiFinishReason(final->finish_reason())) : json(nullptr)}}});
  if (include_usage) chunk["usage"] = nullptr;
  if (final != nullptr) chunk["vismoe"] = Extension(*final);
  return absl::StrCat("data: ", Dump(chunk), "\n\n");
}

std::string UsageEvent(const CompletionHeader& header, const v1::FinalResult& final) {
  json chunk = Header(header, "chat.completion.chunk");
  chunk["choices"] = json::array();
  chunk["usage"] = Usage(final.usage());
  return absl::StrCat("data: ", Dump(chunk), "\n\n");
}

std::string ErrorEvent(const absl::Status& status) {
  return absl::StrCat("data: ", ErrorJson(status, ToHttpStatus(status.code())), "\n\n", kDoneEvent);
}

std::string ErrorJson(const absl::Status& status, int http_status) {
  const json body = {{"error",
                      {{"message", std::string(status.message())},
                       {"type", OpenAiErrorType(http_status)},
                       {"param", nullptr},
                       {"code", StatusLabel(ToGrpcStatus(status).error_code())}}}};
  return Dump(body);
}

std::string ModelListJson(absl::string_view model, int64_t created, int max_context_tokens) {
  const json body = {{"object", "list"},
                     {"data", json::array({{{"id", std::string(model)},
                                            {"object", "model"},
                                            {"created", created},
                                            {"owned_by", "vismoe"},
                                            {"max_model_len", max_context_tokens}}})}};
  return Dump(body);
}

}  // namespace vismoe::server
