// ChatTemplate's Jinja path: finding the checkpoint's template, the render
// context apply_chat_template builds, and tokenising the marked rendering.
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/chat_template.h"
#include "engine/model/utf8.h"
#include "nlohmann/json.hpp"

namespace vismoe {
namespace {

// No published template is near this; a bigger file is not a chat template.
constexpr size_t kMaxTemplateBytes = 1 << 20;

// The file's JSON, or nullopt when the file does not exist.
absl::StatusOr<std::optional<nlohmann::json>> ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::optional<nlohmann::json>();
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  return std::optional<nlohmann::json>(std::move(j));
}

// A "chat_template" value: a string, or transformers' list of named
// templates, of which the one named "default" is used.
absl::StatusOr<std::string> TemplateText(const nlohmann::json& v, const std::string& path) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    for (const nlohmann::json& t : v) {
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") &&
          t["template"].is_string()) {
        return t["template"].get<std::string>();
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": chat_template is a list of named templates without a \"default\""));
  }
  return absl::InvalidArgumentError(absl::StrCat(path, ": chat_template must be a string"));
}

// The template's text and file name, in transformers' order; nullopt when
// the checkpoint has none.
absl::StatusOr<std::optional<std::pair<std::string, std::string>>> FindTemplate(
    const std::string& dir) {
  using Found = std::optional<std::pair<std::string, std::string>>;
  const std::string jinja_path = dir + "/chat_template.jinja";
  if (std::ifstream in(jinja_path, std::ios::binary); in) {
    std::stringstream ss;
    ss << in.rdbuf();
    return Found({ss.str(), jinja_path});
  }
  for (const char* file : {"chat_template.json", "tokenizer_config.json"}) {
    const std::string path = absl::StrCat(dir, "/", file);
    VISMOE_ASSIGN_OR_RETURN(std::optional<nlohmann::json> j, ReadJson(path));
    if (!j.has_value() || !j->contains("chat_template") || (*j)["chat_template"].is_null())
      continue;
    VISMOE_ASSIGN_OR_RETURN(std::string text, TemplateText((*j)["chat_template"], path));
    return Found({std::move(text), path});
  }
  return Found();
}

// The named special tokens tokenizer_config.json sets, as strings (an
// AddedToken object gives its "content").
absl::StatusOr<jinja::Dict> SpecialTokens(const std::string& dir) {
  const std::string path = dir + "/tokenizer_config.json";
  VISMOE_ASSIGN_OR_RETURN(std::optional<nlohmann::json> j, ReadJson(path));
  jinja::Dict out;
  if (!j.has_value()) return out;
  for (const char* name : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                           "cls_token", "mask_token"}) {
    if (!j->contains(name) || (*j)[name].is_null()) continue;
    const nlohmann::json& v = (*j)[name];
    if (v.is_string()) {
      out.emplace_back(name, jinja::Value::String(v.get<std::string>()));
    } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
      out.emplace_back(name, jinja::Value::String(v["content"].get<std::string>()));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", name, " must be a string or an object with \"content\""));
    }
  }
  return out;
}

// A message as transformers' processors and callers pass it.
jinja::Value MessageValue(const ChatMessage& m) {
  bool has_image = false;
  for (const ContentPart& p : m.content) has_image |= p.kind == ContentPart::Kind::kImage;
  jinja::Value content;
  if (!has_image) {
    jinja::Str text;
    for (const ContentPart& p : m.content) text.Append(jinja::Str::Untrusted(p.text));
    content = jinja::Value::String(std::move(text));
  } else {
    jinja::List parts;
    for (const ContentPart& p : m.content) {
      if (p.kind == ContentPart::Kind::kImage) {
        parts.push_back(jinja::Value::MakeDict({{"type", jinja::Value::String("image")}}));
      } else {
        parts.push_back(jinja::Value::MakeDict(
            {{"type", jinja::Value::String("text")},
             {"text", jinja::Value::String(jinja::Str::Untrusted(p.text))}}));
      }
    }
    content = jinja::Value::MakeList(std::move(parts));
  }
  return jinja::Value::MakeDict({{"role", jinja::Value::String(m.role)}, {"content", content}});
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::Load(const std::string& dir, const Tokenizer& tokenizer,
                                                const ModelConfig& config) {
  VISMOE_ASSIGN_OR_RETURN(auto found, FindTemplate(dir));
  if (!found.has_value()) return Create(tokenizer, config);
  const auto& [text, path] = *found;
  if (text.size() > kMaxTemplateBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the chat template is ", text.size(),
                                                   " bytes, more than ", kMaxTemplateBytes));
  }
  auto parsed = jinja::Template::Parse(text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", parsed.status().message()));
  }
  ChatTemplate t;
  t.jinja_ = std::make_shared<const jinja::Template>(*std::move(parsed));
  t.source_ = path;
  VISMOE_ASSIGN_OR_RETURN(t.special_tokens_, SpecialTokens(dir));
  for (auto [marker, name] :
       {std::pair{&t.im_start_, "<|im_start|>"}, {&t.im_end_, "<|im_end|>"}}) {
    if (const AddedToken* a = tokenizer.added_vocabulary().FindByContent(name))
      *marker = {a->id, a->content};
  }
  if (config.has_vision) {
    const AddedToken* pad = tokenizer.added_vocabulary().FindById(config.image_token_id);
    if (pad == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("chat template: config.json image_token_id = ", config.image_token_id,
                       " is not an added token of tokenizer.json"));
    }
    t.image_pad_ = {pad->id, pad->content};
    if (const AddedToken* a = tokenizer.added_vocabulary().FindById(config.vision_start_token_id)) {
      t.vision_start_ = {a->id, a->content};
    }
    if (const AddedToken* a = tokenizer.added_vocabulary().FindById(config.vision_end_token_id)) {
      t.vision_end_ = {a->id, a->content};
    }
  }
  return t;
}

absl::StatusOr<jinja::Str> ChatTemplate::RenderJinja(const std::vector<ChatMessage>& messages,
                                                     bool add_generation_prompt) const {
  // The checks every family shares (the ChatML path's): a template that
  // ignores a role or a late system message would drop the user's text.
  if (messages.empty())
    return absl::InvalidArgumentError("chat template: the message list is empty");
  jinja::List list;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return absl::InvalidArgumentError(absl::StrCat("chat template: messages[", i,
                                                     "]: unknown role \"", m.role,
                                                     "\" (expected system, user or assistant)"));
    }
    if (m.role == "system" && i != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat template: messages[", i, "]: a system message is only allowed first"));
    }
    for (size_t p = 0; p < m.content.size(); ++p) {
      if (m.content[p].kind == ContentPart::Kind::kImage && !has_vision()) {
        return absl::InvalidArgumentError(absl::StrCat("chat template: messages[", i, "].content[",
                                                       p, "]: this model has no vision tokens"));
      }
    }
    list.push_back(MessageValue(m));
  }
  jinja::Dict context = special_tokens_;
  context.emplace_back("messages", jinja::Value::MakeList(std::move(list)));
  context.emplace_back("add_generation_prompt", jinja::Value::Bool(add_generation_prompt));
  context.emplace_back("tools", jinja::Value::None());
  context.emplace_back("documents", jinja::Value::None());
  auto out = jinja_->Render(jinja::Value::MakeDict(std::move(context)));
  if (!out.ok())
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", out.status().message()));
  if (!utf8::IsValid(out->text)) {
    return absl::InvalidArgumentError("chat template: the rendered prompt is not valid UTF-8");
  }
  return out;
}

}  // namespace vismoe
