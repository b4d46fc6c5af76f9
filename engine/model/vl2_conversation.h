// DeepSeek-VL2's prompt as its published processor tokenizes a conversation
// in inference mode (format_messages_v2 + tokenize_with_images,
// engine/model/deepseek_vl2.md): BOS; a first system message's text; each
// user turn rendered "<|User|>: " + content + "\n\n<|Assistant|>:" and
// tokenized segment by segment around its "<image>" placeholders, each
// placeholder becoming that image's run of <image> ids; each assistant turn's
// text + EOS on its own; the conversation ends with an empty assistant turn
// whose EOS is dropped. Not a Jinja template: rendering the published display
// string (sft_format) and tokenizing it would give different ids.
// Contents are stripped of ASCII whitespace (Python's str.strip() also strips
// Unicode spaces) and tokenized with added tokens recognised, as the
// published processor does.
// Thread safety: pure function over a const Tokenizer.
#ifndef VISMOE_ENGINE_MODEL_VL2_CONVERSATION_H_
#define VISMOE_ENGINE_MODEL_VL2_CONVERSATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/model/tokenizer.h"

namespace vismoe {

struct Vl2Message {
  std::string role;  // "system", "<|User|>" / "user", "<|Assistant|>" / "assistant"
  std::string content;
};

// The special ids the prompt needs, read from the tokenizer.
struct Vl2SpecialIds {
  int bos = -1;    // <｜begin▁of▁sentence｜>
  int eos = -1;    // <｜end▁of▁sentence｜>
  int image = -1;  // <image>
  // NotFound naming the token the tokenizer lacks.
  static absl::StatusOr<Vl2SpecialIds> From(const Tokenizer& tokenizer);
};

// The prompt's ids. `image_tokens[i]` is the <image> count of the i-th image
// in prompt order (Vl2ImageTokens). InvalidArgument for a system message that
// is not first, an unknown role, a conversation that does not end with an
// empty assistant turn, or a number of placeholders other than
// image_tokens.size().
absl::StatusOr<std::vector<int>> Vl2ConversationIds(const Tokenizer& tokenizer,
                                                    const Vl2SpecialIds& ids,
                                                    absl::Span<const Vl2Message> messages,
                                                    absl::Span<const int64_t> image_tokens);

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_VL2_CONVERSATION_H_
