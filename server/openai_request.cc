#include "server/openai_request.h"

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"

namespace vismoe::server {
namespace {

using nlohmann::json;

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

// A client value quoted in an error message, cut short: messages go back to
// the client and into the log.
std::string Quote(absl::string_view value) {
  constexpr size_t kMax = 64;
  if (value.size() <= kMax) return absl::StrCat("'", value, "'");
  return absl::StrCat("'", value.substr(0, kMax), "...'");
}

std::string TypeError(const json& v, absl::string_view expected) {
  return absl::StrCat("expected ", expected, ", got ", v.type_name());
}

// The member `key` of `obj`; null counts as absent, as in OpenAI's API.
const json* Member(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<int64_t> Integer(const json& v, absl::string_view field) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Bad(field, "integer too large");
    }
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return Bad(field, TypeError(v, "an integer"));
}

absl::StatusOr<double> Number(const json& v, absl::string_view field) {
  if (!v.is_number()) return Bad(field, TypeError(v, "a number"));
  return v.get<double>();
}

absl::StatusOr<bool> Bool(const json& v, absl::string_view field) {
  if (!v.is_boolean()) return Bad(field, TypeError(v, "true or false"));
  return v.get<bool>();
}

absl::StatusOr<const std::string*> String(const json& v, absl::string_view field) {
  if (!v.is_string()) return Bad(field, TypeError(v, "a string"));
  return v.get_ptr<const std::string*>();
}

// A max-tokens value as the proto's int32 (the validator checks it against
// the server's limit).
absl::StatusOr<int32_t> MaxTokens(const json& v, absl::string_view field) {
  absl::StatusOr<int64_t> n = Integer(v, field);
  if (!n.ok()) return n.status();
  if (*n < 1) return Bad(field, absl::StrCat("must be >= 1, got ", *n));
  return static_cast<int32_t>(std::min<int64_t>(*n, std::numeric_limits<int32_t>::max()));
}

// The bytes of a base64 `data:` URI of an image type the server decodes.
absl::StatusOr<std::string> DecodeImageUrl(absl::string_view url, absl::string_view field) {
  if (absl::StartsWithIgnoreCase(url, "http://") || absl::StartsWithIgnoreCase(url, "https://")) {
    return Bad(field,
               "remote image URLs are not fetched by this server (that would let any client make "
               "it connect anywhere); send the image inline as a data: URI "
               "(data:image/png;base64,...)");
  }
  if (!absl::StartsWithIgnoreCase(url, "data:")) {
    return Bad(field, "expected a data: URI (data:image/png;base64,...)");
  }
  const size_t comma = url.find(',');
  if (comma == absl::string_view::npos) return Bad(field, "malformed data: URI (no comma)");
  const std::vector<absl::string_view> meta = absl::StrSplit(url.substr(5, comma - 5), ';');
  const std::string type = absl::AsciiStrToLower(meta[0]);
  if (type != "image/png" && type != "image/jpeg" && type != "image/jpg" && type != "image/webp") {
    return Bad(field, absl::StrCat("data: URI of type ", Quote(type),
                                   " is not an image this server decodes (image/png, image/jpeg, "
                                   "image/webp)"));
  }
  bool base64 = false;
  for (size_t i = 1; i < meta.size(); ++i) base64 |= absl::EqualsIgnoreCase(meta[i], "base64");
  if (!base64) return Bad(field, "the data: URI must be base64-encoded (;base64,)");
  std::string bytes;
  if (!absl::Base64Unescape(url.substr(comma + 1), &bytes)) {
    return Bad(field, "the data: URI's payload is not valid base64");
  }
  if (bytes.empty()) return Bad(field, "the data: URI holds no image bytes");
  return bytes;
}

absl::Status AddPart(const json& part, const std::string& field, v1::ChatMessage* out) {
  if (!part.is_object()) return Bad(field, TypeError(part, "an object"));
  const json* type = Member(part, "type");
  if (type == nullptr) return Bad(field + ".type", "missing");
  absl::StatusOr<const std::string*> t = String(*type, field + ".type");
  if (!t.ok()) return t.status();
  if (**t == "text") {
    const json* text = Member(part, "text");
    if (text == nullptr) return Bad(field + ".text", "missing");
    absl::StatusOr<const std::string*> s = String(*text, field + ".text");
    if (!s.ok()) return s.status();
    out->add_parts()->set_text(**s);
    return absl::OkStatus();
  }
  if (**t == "image_url") {
    const json* image = Member(part, "image_url");
    if (image == nullptr) return Bad(field + ".image_url", "missing");
    // {"url": ...} as OpenAI sends it; a bare string as some clients do.
    const json* url = image->is_object() ? Member(*image, "url") : image;
    const std::string url_field = field + (image->is_object() ? ".image_url.url" : ".image_url");
    if (url == nullptr) return Bad(url_field, "missing");
    absl::StatusOr<const std::string*> u = String(*url, url_field);
    if (!u.ok()) return u.status();
    absl::StatusOr<std::string> bytes = DecodeImageUrl(**u, url_field);
    if (!bytes.ok()) return bytes.status();
    out->add_parts()->mutable_image()->set_data(std::move(*bytes));
    return absl::OkStatus();
  }
  return Bad(field + ".type",
             absl::StrCat("content part type ", Quote(**t), " is not supported (text, image_url)"));
}

absl::Status AddMessage(const json& m, const std::string& field, v1::GenerateRequest* out) {
  if (!m.is_object()) return Bad(field, TypeError(m, "an object"));
  const json* role = Member(m, "role");
  if (role == nullptr) return Bad(field + ".role", "missing");
  absl::StatusOr<const std::string*> r = String(*role, field + ".role");
  if (!r.ok()) return r.status();
  std::string name = **r;
  if (name == "developer") name = "system";  // OpenAI's newer name for it
  if (name == "tool" || name == "function") {
    return Bad(field + ".role", absl::StrCat(Quote(name),
                                             " messages are not supported: this server does "
                                             "not call tools"));
  }
  if (name != "system" && name != "user" && name != "assistant") {
    return Bad(field + ".role",
               absl::StrCat("unknown role ", Quote(name), " (system, developer, user, assistant)"));
  }
  if (const json* calls = Member(m, "tool_calls"); calls != nullptr && !calls->empty()) {
    return Bad(field + ".tool_calls", "not supported: this server does not call tools");
  }
  v1::ChatMessage* msg = out->add_messages();
  msg->set_role(name);
  const json* content = Member(m, "content");
  if (content == nullptr) {
    if (name == "assistant") return absl::OkStatus();  // an empty assistant turn
    return Bad(field + ".content", "missing");
  }
  if (content->is_string()) {
    msg->add_parts()->set_text(content->get<std::string>());
    return absl::OkStatus();
  }
  if (!content->is_array()) {
    return Bad(field + ".content", TypeError(*content, "a string or an array of parts"));
  }
  for (size_t i = 0; i < content->size(); ++i) {
    absl::Status s = AddPart((*content)[i], absl::StrCat(field, ".content[", i, "]"), msg);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// Fields asking for something this server does not do; refused when set to
// anything but their "off" value, so a client never silently loses them.
absl::Status RefuseUnsupported(const json& body) {
  const auto off = [&](const char* key, auto is_off) -> absl::Status {
    const json* v = Member(body, key);
    if (v == nullptr || is_off(*v)) return absl::OkStatus();
    return Bad(key, "not supported by this server");
  };
  const auto empty = [](const json& v) { return v.empty(); };
  const auto is_false = [](const json& v) { return v.is_boolean() && !v.get<bool>(); };
  const auto zero = [](const json& v) { return v.is_number() && v.get<double>() == 0; };
  const auto none = [](const json& v) { return v.is_string() && v.get<std::string>() == "none"; };
  const auto text_format = [](const json& v) {
    return v.is_object() && v.value("type", std::string()) == "text";
  };
  for (absl::Status s :
       {off("tools", empty), off("functions", empty), off("tool_choice", none),
        off("function_call", none), off("logprobs", is_false), off("top_logprobs", zero),
        off("frequency_penalty", zero), off("presence_penalty", zero), off("logit_bias", empty),
        off("response_format", text_format), off("audio", empty)}) {
    if (!s.ok()) return s;
  }
  if (const json* n = Member(body, "n"); n != nullptr) {
    absl::StatusOr<int64_t> v = Integer(*n, "n");
    if (!v.ok()) return v.status();
    if (*v != 1) return Bad("n", absl::StrCat("only n = 1 is supported, got ", *v));
  }
  return absl::OkStatus();
}

absl::Status ParseSampling(const json& body, v1::SamplingParams* s) {
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    const json* v = Member(body, key);
    if (v == nullptr) continue;
    absl::StatusOr<int32_t> n = MaxTokens(*v, key);
    if (!n.ok()) return n.status();
    s->set_max_new_tokens(*n);
    break;  // max_completion_tokens, OpenAI's newer name, wins
  }
  if (const json* v = Member(body, "temperature"); v != nullptr) {
    absl::StatusOr<double> t = Number(*v, "temperature");
    if (!t.ok()) return t.status();
    s->set_temperature(static_cast<float>(*t));
  }
  if (const json* v = Member(body, "top_p"); v != nullptr) {
    absl::StatusOr<double> p = Number(*v, "top_p");
    if (!p.ok()) return p.status();
    s->set_top_p(static_cast<float>(*p));
  }
  if (const json* v = Member(body, "seed"); v != nullptr) {
    absl::StatusOr<int64_t> seed = Integer(*v, "seed");
    if (!seed.ok()) return seed.status();
    s->set_seed(static_cast<uint64_t>(*seed));  // a negative seed is just another seed
  }
  if (const json* v = Member(body, "stop"); v != nullptr) {
    if (v->is_string()) {
      s->add_stop(v->get<std::string>());
    } else if (v->is_array()) {
      for (size_t i = 0; i < v->size(); ++i) {
        absl::StatusOr<const std::string*> stop = String((*v)[i], absl::StrCat("stop[", i, "]"));
        if (!stop.ok()) return stop.status();
        s->add_stop(**stop);
      }
    } else {
      return Bad("stop", TypeError(*v, "a string or an array of strings"));
    }
  }
  return absl::OkStatus();
}

// The server's own knobs: {"top_k": int, "request_id": string, "policy":
// {v1.PolicyOverrides as JSON}}.
absl::Status ParseExtension(const json& ext, v1::GenerateRequest* out) {
  if (!ext.is_object()) return Bad("vismoe", TypeError(ext, "an object"));
  for (const auto& [key, value] : ext.items()) {
    if (value.is_null()) continue;
    if (key == "top_k") {
      absl::StatusOr<int64_t> k = Integer(value, "vismoe.top_k");
      if (!k.ok()) return k.status();
      if (*k < 0 || *k > std::numeric_limits<int32_t>::max()) {
        return Bad("vismoe.top_k", absl::StrCat("must be in [0, 2^31), got ", *k));
      }
      out->mutable_sampling()->set_top_k(static_cast<int32_t>(*k));
    } else if (key == "request_id") {
      absl::StatusOr<const std::string*> id = String(value, "vismoe.request_id");
      if (!id.ok()) return id.status();
      out->set_request_id(**id);
    } else if (key == "policy") {
      if (!value.is_object()) return Bad("vismoe.policy", TypeError(value, "an object"));
      const std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
      const auto parsed = google::protobuf::util::JsonStringToMessage(text, out->mutable_policy());
      if (!parsed.ok()) return Bad("vismoe.policy", std::string(parsed.message()));
    } else {
      return Bad("vismoe",
                 absl::StrCat("unknown field ", Quote(key), " (top_k, request_id, policy)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ChatCompletionRequest> ParseChatCompletionRequest(absl::string_view body) {
  json doc;
  try {
    doc = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    // e.what() names the byte position and what was expected there.
    return absl::InvalidArgumentError(absl::StrCat("request body is not valid JSON: ", e.what()));
  }
  if (!doc.is_object()) return Bad("request body", TypeError(doc, "a JSON object"));
  ChatCompletionRequest out;
  if (const json* model = Member(doc, "model"); model != nullptr) {
    absl::StatusOr<const std::string*> m = String(*model, "model");
    if (!m.ok()) return m.status();
    out.model = **m;
  }
  const json* messages = Member(doc, "messages");
  if (messages == nullptr) return Bad("messages", "missing");
  if (!messages->is_array()) return Bad("messages", TypeError(*messages, "an array"));
  if (messages->empty()) return Bad("messages", "must hold at least one message");
  for (size_t i = 0; i < messages->size(); ++i) {
    absl::Status s = AddMessage((*messages)[i], absl::StrCat("messages[", i, "]"), &out.request);
    if (!s.ok()) return s;
  }
  if (absl::Status s = RefuseUnsupported(doc); !s.ok()) return s;
  if (absl::Status s = ParseSampling(doc, out.request.mutable_sampling()); !s.ok()) return s;
  if (const json* v = Member(doc, "stream"); v != nullptr) {
    absl::StatusOr<bool> b = Bool(*v, "stream");
    if (!b.ok()) return b.status();
    out.stream = *b;
  }
  if (const json* v = Member(doc, "stream_options"); v != nullptr) {
    if (!v->is_object()) return Bad("stream_options", TypeError(*v, "an object"));
    if (const json* u = Member(*v, "include_usage"); u != nullptr) {
      absl::StatusOr<bool> b = Bool(*u, "stream_options.include_usage");
      if (!b.ok()) return b.status();
      out.include_usage = *b;
    }
  }
  if (const json* ext = Member(doc, "vismoe"); ext != nullptr) {
    if (absl::Status s = ParseExtension(*ext, &out.request); !s.ok()) return s;
  }
  return out;
}

}  // namespace vismoe::server
