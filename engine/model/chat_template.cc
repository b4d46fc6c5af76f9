#include "engine/model/chat_template.h"

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace vismoe {
namespace {

struct MarkerOr {
  int id;
  std::string text;
};

absl::StatusOr<MarkerOr> ByName(const Tokenizer& tok, const std::string& name) {
  const AddedToken* t = tok.added_vocabulary().FindByContent(name);
  if (t == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("chat template: tokenizer.json has no added token \"", name, "\""));
  }
  return MarkerOr{t->id, t->content};
}

absl::StatusOr<MarkerOr> ById(const Tokenizer& tok, int id, const std::string& field) {
  const AddedToken* t = tok.added_vocabulary().FindById(id);
  if (t == nullptr) {
    return absl::NotFoundError(absl::StrCat("chat template: config.json ", field, " = ", id,
                                            " is not an added token of tokenizer.json"));
  }
  return MarkerOr{t->id, t->content};
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::Create(const Tokenizer& tokenizer) {
  ChatTemplate t;
  const std::pair<Marker*, const char*> wanted[] = {
      {&t.im_start_, "<|im_start|>"},         {&t.im_end_, "<|im_end|>"},
      {&t.vision_start_, "<|vision_start|>"}, {&t.image_pad_, "<|image_pad|>"},
      {&t.vision_end_, "<|vision_end|>"},
  };
  for (const auto& [marker, name] : wanted) {
    VISMOE_ASSIGN_OR_RETURN(const MarkerOr m, ByName(tokenizer, name));
    *marker = {m.id, m.text};
  }
  return t;
}

absl::StatusOr<ChatTemplate> ChatTemplate::Create(const Tokenizer& tokenizer,
                                                  const ModelConfig& config) {
  ChatTemplate t;
  VISMOE_ASSIGN_OR_RETURN(const MarkerOr start, ByName(tokenizer, "<|im_start|>"));
  VISMOE_ASSIGN_OR_RETURN(const MarkerOr end, ByName(tokenizer, "<|im_end|>"));
  t.im_start_ = {start.id, start.text};
  t.im_end_ = {end.id, end.text};
  if (!config.has_vision) return t;
  const std::tuple<Marker*, int, const char*> wanted[] = {
      {&t.vision_start_, config.vision_start_token_id, "vision_start_token_id"},
      {&t.image_pad_, config.image_token_id, "image_token_id"},
      {&t.vision_end_, config.vision_end_token_id, "vision_end_token_id"},
  };
  for (const auto& [marker, id, field] : wanted) {
    VISMOE_ASSIGN_OR_RETURN(const MarkerOr m, ById(tokenizer, id, field));
    *marker = {m.id, m.text};
  }
  return t;
}

absl::StatusOr<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                                 bool add_generation_prompt) const {
  if (jinja_ != nullptr) {
    VISMOE_ASSIGN_OR_RETURN(jinja::Str out, RenderJinja(messages, add_generation_prompt));
    return std::move(out.text);
  }
  Pieces pieces;
  VISMOE_RETURN_IF_ERROR(RenderPieces(messages, add_generation_prompt, &pieces));
  std::string out;
  for (const Marker& piece : pieces) out += piece.text;
  return out;
}

absl::StatusOr<std::vector<int>> ChatTemplate::Tokenize(const Tokenizer& tokenizer,
                                                        const std::vector<ChatMessage>& messages,
                                                        bool add_generation_prompt,
                                                        TextTokens text) const {
  if (jinja_ != nullptr) {
    VISMOE_ASSIGN_OR_RETURN(jinja::Str out, RenderJinja(messages, add_generation_prompt));
    if (text == TextTokens::kAllowSpecial) return tokenizer.Encode(out.text);
    return tokenizer.EncodeMarked(out.text, out.untrusted);
  }
  if (text == TextTokens::kAllowSpecial) {
    VISMOE_ASSIGN_OR_RETURN(const std::string rendered, Render(messages, add_generation_prompt));
    return tokenizer.Encode(rendered);
  }
  Pieces pieces;
  VISMOE_RETURN_IF_ERROR(RenderPieces(messages, add_generation_prompt, &pieces));
  std::vector<int> ids;
  for (const Marker& piece : pieces) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      continue;
    }
    const std::vector<int> plain = tokenizer.Encode(piece.text, Tokenizer::AddedTokens::kIgnore);
    ids.insert(ids.end(), plain.begin(), plain.end());
  }
  return ids;
}

absl::Status ChatTemplate::RenderPieces(const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt, Pieces* out) const {
  if (messages.empty()) {
    return absl::InvalidArgumentError("chat template: the message list is empty");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    VISMOE_RETURN_IF_ERROR(RenderMessage(messages[i], i, out));
  }
  if (add_generation_prompt) {
    out->push_back(im_start_);
    out->push_back({-1, "assistant\n"});
  }
  return absl::OkStatus();
}

absl::Status ChatTemplate::RenderMessage(const ChatMessage& m, size_t i, Pieces* out) const {
  const auto append_text = [out](absl::string_view text) {
    if (out->empty() || out->back().id >= 0) out->push_back({-1, ""});
    out->back().text.append(text.data(), text.size());
  };
  const bool user = m.role == "user";
  if (m.role == "system") {
    if (i != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat template: messages[", i, "]: a system message is only allowed first"));
    }
  } else if (!user && m.role != "assistant") {
    return absl::InvalidArgumentError(absl::StrCat("chat template: messages[", i,
                                                   "]: unknown role \"", m.role,
                                                   "\" (expected system, user or assistant)"));
  }
  out->push_back(im_start_);
  append_text(absl::StrCat(m.role, "\n"));
  for (size_t p = 0; p < m.content.size(); ++p) {
    const ContentPart& part = m.content[p];
    if (part.kind == ContentPart::Kind::kText) {
      append_text(part.text);
      continue;
    }
    // The Qwen3-VL template silently drops images outside user turns; that
    // would desynchronise images and pads, so it is an error here.
    if (!user) {
      return absl::InvalidArgumentError(absl::StrCat("chat template: messages[", i, "].content[", p,
                                                     "]: images are only "
                                                     "allowed in user messages, not \"",
                                                     m.role, "\""));
    }
    if (!has_vision()) {
      return absl::InvalidArgumentError(absl::StrCat("chat template: messages[", i, "].content[", p,
                                                     "]: this model has no vision tokens"));
    }
    out->insert(out->end(), {vision_start_, image_pad_, vision_end_});
  }
  out->push_back(im_end_);
  append_text("\n");
  return absl::OkStatus();
}

}  // namespace vismoe
