#include "client/chat_completion_call.h"

#include <httplib.h>

#include <chrono>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/media_type.h"
#include "google/protobuf/util/json_util.h"

namespace vismoe::client {
namespace {

using nlohmann::json;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

grpc::StatusCode CodeOfHttpStatus(int status) {
  switch (status) {
    case 400:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case 401:
      return grpc::StatusCode::UNAUTHENTICATED;
    case 403:
      return grpc::StatusCode::PERMISSION_DENIED;
    case 404:
      return grpc::StatusCode::NOT_FOUND;
    case 413:
    case 429:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case 499:
      return grpc::StatusCode::CANCELLED;
    case 501:
      return grpc::StatusCode::UNIMPLEMENTED;
    case 503:
      return grpc::StatusCode::UNAVAILABLE;
    case 504:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    default:
      return grpc::StatusCode::INTERNAL;
  }
}

// An OpenAI error body as a status of the HTTP status's code.
grpc::Status ErrorStatus(int http_status, const json& body) {
  std::string message = absl::StrCat("HTTP ", http_status);
  if (body.is_object() && body.contains("error") && body["error"].is_object()) {
    message = body["error"].value("message", message);
  }
  return grpc::Status(CodeOfHttpStatus(http_status), message);
}

// Consumes the complete events at the front of `buffer`.
void ConsumeEvents(std::string* buffer, std::chrono::steady_clock::time_point start,
                   GenerateOutcome* out, bool* done) {
  size_t end = 0;
  while ((end = buffer->find("\n\n")) != std::string::npos) {
    absl::string_view event = absl::string_view(*buffer).substr(0, end);
    if (absl::ConsumePrefix(&event, "data: ") && !*done) {
      if (event == "[DONE]") {
        *done = true;
      } else {
        const json chunk = json::parse(event, nullptr, /*allow_exceptions=*/false);
        if (chunk.is_object() && chunk.contains("error")) {
          const json& e = chunk["error"];
          out->status = grpc::Status(grpc::StatusCode::UNKNOWN, e.value("message", "error"));
        } else if (chunk.is_object() && chunk.contains("choices")) {
          for (const json& choice : chunk["choices"]) {
            const std::string text = choice["delta"].value("content", std::string());
            if (!text.empty() && out->ttft_seconds < 0) out->ttft_seconds = SecondsSince(start);
            out->text += text;
          }
          if (chunk.contains("vismoe") && chunk["vismoe"].is_object()) {
            out->has_final = google::protobuf::util::JsonStringToMessage(chunk["vismoe"].dump(),
                                                                         &out->final_result)
                                 .ok();
          }
        }
      }
    }
    buffer->erase(0, end + 2);
  }
}

}  // namespace

absl::StatusOr<HttpTarget> ParseHttpTarget(const std::string& address) {
  const size_t colon = address.rfind(':');
  HttpTarget t;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &t.port) || t.port <= 0 || t.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected host:port for the HTTP API, got '", address, "'"));
  }
  t.host = address.substr(0, colon);
  return t;
}

json ChatCompletionBody(const vismoe::v1::GenerateRequest& request) {
  json messages = json::array();
  for (const vismoe::v1::ChatMessage& m : request.messages()) {
    json parts = json::array();
    for (const vismoe::v1::ContentPart& p : m.parts()) {
      if (p.has_image()) {
        std::string type = SniffImageMediaType(p.image().data());
        if (type.empty()) type = "image/png";
        parts.push_back({{"type", "image_url"},
                         {"image_url",
                          {{"url", absl::StrCat("data:", type, ";base64,",
                                                absl::Base64Escape(p.image().data()))}}}});
      } else {
        parts.push_back({{"type", "text"}, {"text", p.text()}});
      }
    }
    messages.push_back({{"role", m.role()}, {"content", parts}});
  }
  const vismoe::v1::SamplingParams& s = request.sampling();
  json body = {{"messages", messages},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"temperature", s.temperature()},
               {"seed", s.seed()}};
  if (s.max_new_tokens() > 0) body["max_tokens"] = s.max_new_tokens();
  if (s.has_top_p()) body["top_p"] = s.top_p();
  if (s.stop_size() > 0)
    body["stop"] = json(std::vector<std::string>(s.stop().begin(), s.stop().end()));
  json ext = json::object();
  if (s.top_k() > 0) ext["top_k"] = s.top_k();
  if (!request.request_id().empty()) ext["request_id"] = request.request_id();
  std::string policy;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (google::protobuf::util::MessageToJsonString(request.policy(), &policy, options).ok() &&
      policy != "{}") {
    ext["policy"] = json::parse(policy);
  }
  if (!ext.empty()) body["vismoe"] = ext;
  return body;
}

GenerateOutcome RunChatCompletion(const HttpTarget& target,
                                  const vismoe::v1::GenerateRequest& request,
                                  absl::Duration timeout) {
  GenerateOutcome out;
  httplib::Client client(target.host, target.port);
  client.set_tcp_nodelay(true);  // the body leaves right after the headers
  const auto micros = absl::ToInt64Microseconds(timeout);
  client.set_read_timeout(micros / 1000000, micros % 1000000);
  client.set_connection_timeout(micros / 1000000, micros % 1000000);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.set_header("Content-Type", "application/json");
  if (!target.api_key.empty()) req.set_header("Authorization", "Bearer " + target.api_key);
  req.body = ChatCompletionBody(request).dump();
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + absl::ToChronoNanoseconds(timeout);
  std::string buffer, error_body;
  bool done = false;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    buffer.append(data, n);
    ConsumeEvents(&buffer, start, &out, &done);
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const bool sent = client.send(req, res, error);
  out.total_seconds = SecondsSince(start);
  if (!sent && std::chrono::steady_clock::now() > deadline) {
    out.status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded");
  } else if (!sent) {
    out.status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              absl::StrCat("HTTP request failed: ", httplib::to_string(error)));
  } else if (res.status != 200) {
    // The receiver saw the error body as if it were events.
    out.status = ErrorStatus(res.status, json::parse(buffer, nullptr, false));
  } else if (!out.status.ok()) {
    // an error event
  } else if (!done || !out.has_final) {
    out.status = grpc::Status(grpc::StatusCode::INTERNAL,
                              "event stream ended without its final chunk and [DONE]");
  }
  const int tokens = out.has_final ? out.final_result.usage().completion_tokens() : 0;
  if (out.ttft_seconds >= 0 && tokens >= 2) {
    out.tpot_seconds = (out.total_seconds - out.ttft_seconds) / (tokens - 1);
  }
  return out;
}

}  // namespace vismoe::client
