// DeepSeek-VL2's prompt as its published processor tokenizes a conversation
// in inference mode (format_messages_v2 + tokenize_with_images,
// engine/model/deepseek_vl2.md): BOS; a first system message's text; each
// user turn rendered "<|User|>: " + content + "\n\n<|Assistant|>:" and
// tokenized segment by segment around its images, each image becoming its
// run of <image> ids; each assistant turn's text + EOS on its own; the
// conversation ends with an empty assistant turn whose EOS is dropped. Not a
// Jinja template: rendering the published display string (sft_format) and
// tokenizing it would give different ids.
// A message's content (its parts joined) is stripped of ASCII whitespace
// (Python's str.strip() also strips Unicode spaces). The published processor
// recognises added tokens written in message text; here only when the caller
// allows it (trusted text), else message text is ordinary text however it is
// spelled, and images come only from image parts.
// Thread safety: pure functions over a const Tokenizer.
#ifndef VISMOE_ENGINE_MODEL_VL2_CONVERSATION_H_
#define VISMOE_ENGINE_MODEL_VL2_CONVERSATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model/chat_message.h"
#include "engine/model/tokenizer.h"

namespace vismoe {

// The special ids the prompt needs, read from the tokenizer.
struct Vl2SpecialIds {
  int bos = -1;    // <｜begin▁of▁sentence｜>
  int eos = -1;    // <｜end▁of▁sentence｜>
  int image = -1;  // <image>
  // NotFound naming the token the tokenizer lacks.
  static absl::StatusOr<Vl2SpecialIds> From(const Tokenizer& tokenizer);
};

// A message as the published processor takes it: "<image>" in `content` is
// an image placeholder (the next image part, in prompt order). Roles
// "<|User|>" and "<|Assistant|>" are "user" and "assistant".
ChatMessage Vl2PublishedMessage(const std::string& role, const std::string& content);

// The prompt's ids. `image_tokens[i]` is the <image> count of the i-th image
// part in prompt order (Vl2ImageTokens); `allow_special` recognises added
// tokens written in text parts. InvalidArgument for a system message that is
// not first, an unknown role, an image outside a user turn, text that is not
// valid UTF-8, a conversation that does not end with an empty assistant turn,
// or a number of image parts other than image_tokens.size().
absl::StatusOr<std::vector<int>> Vl2ConversationIds(const Tokenizer& tokenizer,
                                                    const Vl2SpecialIds& ids,
                                                    absl::Span<const ChatMessage> messages,
                                                    absl::Span<const int64_t> image_tokens,
                                                    bool allow_special);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_VL2_CONVERSATION_H_
