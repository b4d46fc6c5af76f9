#include "engine/model/vl2_conversation.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/core/status_macros.h"
#include "engine/model/utf8.h"

namespace vismoe {
namespace {

constexpr char kImage[] = "<image>";

bool IsUser(const std::string& role) { return role == "user" || role == "<|User|>"; }
bool IsAssistant(const std::string& role) { return role == "assistant" || role == "<|Assistant|>"; }

// The message's parts with the joined content's leading and trailing ASCII
// whitespace stripped (an image part ends the strip).
std::vector<ContentPart> Stripped(const std::vector<ContentPart>& parts) {
  std::vector<ContentPart> out = parts;
  for (auto it = out.begin(); it != out.end() && it->kind == ContentPart::Kind::kText;) {
    it->text = std::string(absl::StripLeadingAsciiWhitespace(it->text));
    if (!it->text.empty()) break;
    it = out.erase(it);
  }
  while (!out.empty() && out.back().kind == ContentPart::Kind::kText) {
    out.back().text = std::string(absl::StripTrailingAsciiWhitespace(out.back().text));
    if (!out.back().text.empty()) break;
    out.pop_back();
  }
  return out;
}

// Tokenizes text pieces of one segment: template text trusted, message text
// trusted only with allow_special.
class Segment {
 public:
  Segment(const Tokenizer& tokenizer, bool allow_special)
      : tokenizer_(tokenizer), allow_special_(allow_special) {}
  void AddTemplate(absl::string_view s) { text_.append(s.data(), s.size()); }
  void AddMessage(absl::string_view s) {
    untrusted_.push_back({text_.size(), text_.size() + s.size()});
    text_.append(s.data(), s.size());
  }
  // Appends the segment's ids to `ids` and starts a new segment.
  absl::Status Flush(std::vector<int>* ids) {
    if (!utf8::IsValid(text_)) {
      return absl::InvalidArgumentError("a message's text is not valid UTF-8");
    }
    const std::vector<int> more =
        allow_special_ ? tokenizer_.Encode(text_) : tokenizer_.EncodeMarked(text_, untrusted_);
    ids->insert(ids->end(), more.begin(), more.end());
    text_.clear();
    untrusted_.clear();
    return absl::OkStatus();
  }

 private:
  const Tokenizer& tokenizer_;
  bool allow_special_;
  std::string text_;
  std::vector<std::pair<size_t, size_t>> untrusted_;
};

}  // namespace

absl::StatusOr<Vl2SpecialIds> Vl2SpecialIds::From(const Tokenizer& tokenizer) {
  Vl2SpecialIds s;
  for (auto [token, out] : {std::pair{"<｜begin▁of▁sentence｜>", &s.bos},
                            {"<｜end▁of▁sentence｜>", &s.eos},
                            {kImage, &s.image}}) {
    *out = tokenizer.TokenToId(token);
    if (*out < 0) {
      return absl::NotFoundError(absl::StrCat("the tokenizer has no '", token, "' token"));
    }
  }
  return s;
}

ChatMessage Vl2PublishedMessage(const std::string& role, const std::string& content) {
  ChatMessage m;
  m.role = role == "<|User|>" ? "user" : role == "<|Assistant|>" ? "assistant" : role;
  const std::vector<absl::string_view> pieces = absl::StrSplit(content, kImage);
  for (size_t p = 0; p < pieces.size(); ++p) {
    if (!pieces[p].empty()) m.content.push_back({ContentPart::Kind::kText, std::string(pieces[p])});
    if (p + 1 < pieces.size()) m.content.push_back({ContentPart::Kind::kImage, "", -1});
  }
  return m;
}

absl::StatusOr<std::vector<int>> Vl2ConversationIds(const Tokenizer& tokenizer,
                                                    const Vl2SpecialIds& special,
                                                    absl::Span<const ChatMessage> messages,
                                                    absl::Span<const int64_t> image_tokens,
                                                    bool allow_special) {
  if (messages.empty() || !IsAssistant(messages.back().role) ||
      !Stripped(messages.back().content).empty()) {
    return absl::InvalidArgumentError(
        "a DeepSeek-VL2 conversation ends with an empty assistant turn");
  }
  std::vector<int> ids = {special.bos};
  size_t image = 0;
  Segment seg(tokenizer, allow_special);
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool user = IsUser(m.role);
    if (!user && m.role != "system" && !IsAssistant(m.role)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown role '", m.role, "'"));
    }
    if (m.role == "system" && i != 0) {
      return absl::InvalidArgumentError("a system message must come first");
    }
    if (user) seg.AddTemplate("<|User|>: ");
    for (const ContentPart& part : Stripped(m.content)) {
      if (part.kind == ContentPart::Kind::kText) {
        seg.AddMessage(part.text);
        continue;
      }
      if (!user) {
        return absl::InvalidArgumentError(
            absl::StrCat("messages[", i, "]: DeepSeek-VL2 takes images in user turns only"));
      }
      if (image >= image_tokens.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the conversation has more images than planned (", image_tokens.size(), ")"));
      }
      VISMOE_RETURN_IF_ERROR(seg.Flush(&ids));
      ids.insert(ids.end(), static_cast<size_t>(image_tokens[image++]), special.image);
    }
    if (user) seg.AddTemplate("\n\n<|Assistant|>:");
    VISMOE_RETURN_IF_ERROR(seg.Flush(&ids));
    if (IsAssistant(m.role)) ids.push_back(special.eos);
  }
  if (image != image_tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the conversation has ", image, " images for ",
                                                   image_tokens.size(), " planned"));
  }
  ids.pop_back();  // the final empty assistant turn's EOS (inference mode)
  return ids;
}

}  // namespace vismoe
