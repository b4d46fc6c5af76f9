#include "engine/model/vl2_conversation.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace vismoe {
namespace {

constexpr char kImage[] = "<image>";

void Append(const std::vector<int>& more, std::vector<int>* ids) {
  ids->insert(ids->end(), more.begin(), more.end());
}

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

absl::StatusOr<std::vector<int>> Vl2ConversationIds(const Tokenizer& tokenizer,
                                                    const Vl2SpecialIds& special,
                                                    absl::Span<const Vl2Message> messages,
                                                    absl::Span<const int64_t> image_tokens) {
  if (messages.empty() ||
      (messages.back().role != "<|Assistant|>" && messages.back().role != "assistant") ||
      !absl::StripAsciiWhitespace(messages.back().content).empty()) {
    return absl::InvalidArgumentError(
        "a DeepSeek-VL2 conversation ends with an empty assistant turn");
  }
  std::vector<int> ids = {special.bos};
  size_t image = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Vl2Message& m = messages[i];
    const absl::string_view content = absl::StripAsciiWhitespace(m.content);
    if (m.role == "system") {
      if (i != 0) return absl::InvalidArgumentError("a system message must come first");
      Append(tokenizer.Encode(content), &ids);
    } else if (m.role == "<|User|>" || m.role == "user") {
      const std::string text = absl::StrCat("<|User|>: ", content, "\n\n<|Assistant|>:");
      const std::vector<absl::string_view> pieces = absl::StrSplit(text, kImage);
      for (size_t p = 0; p < pieces.size(); ++p) {
        Append(tokenizer.Encode(pieces[p]), &ids);
        if (p + 1 == pieces.size()) break;
        if (image >= image_tokens.size()) {
          return absl::InvalidArgumentError(
              absl::StrCat("the conversation has more <image> placeholders than images (",
                           image_tokens.size(), ")"));
        }
        ids.insert(ids.end(), static_cast<size_t>(image_tokens[image++]), special.image);
      }
    } else if (m.role == "<|Assistant|>" || m.role == "assistant") {
      Append(tokenizer.Encode(content), &ids);
      ids.push_back(special.eos);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown role '", m.role, "'"));
    }
  }
  if (image != image_tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the conversation has ", image,
                                                   " <image> placeholders for ",
                                                   image_tokens.size(), " images"));
  }
  ids.pop_back();  // the final empty assistant turn's EOS (inference mode)
  return ids;
}

}  // namespace vismoe
