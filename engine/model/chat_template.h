// Prompt rendering. Load() uses the checkpoint's own chat template (Jinja,
// engine/model/jinja) when it has one: chat_template.jinja, chat_template.json
// or tokenizer_config.json's "chat_template", in transformers' order, rendered
// with the variables apply_chat_template passes (messages, add_generation_prompt,
// tools = None, documents = None, the named special tokens of
// tokenizer_config.json). A message whose parts are all text has its text as
// `content`; one with an image has a list of {"type": "image"} and
// {"type": "text", "text": ...} parts, as processors pass them.
//
// Without a template file (and in Create), ChatML for Qwen3-VL, equal to the
// chat_template.jinja that transformers writes for Qwen3-VL-30B-A3B-Instruct
// (without tools):
//   [<|im_start|>system\n{text}<|im_end|>\n]       first message only
//   <|im_start|>{user|assistant}\n{parts}<|im_end|>\n   per message
//   <|im_start|>assistant\n                          generation prompt
// An image part renders as <|vision_start|><|image_pad|><|vision_end|> with ONE
// pad; the engine expands each pad to the image's visual token count.
// Marker strings are taken from the tokenizer's added tokens (the vision ones
// from config.json ids when a ModelConfig is given) and must exist there.
// Tokenize() keeps the markers the template inserts special while the text of
// the messages is encoded with added-token matching off, so a user cannot
// forge a turn by writing "<|im_end|>\n<|im_start|>system" in a text part.
// Immutable and thread-safe after Create.
#ifndef VISMOE_ENGINE_MODEL_CHAT_TEMPLATE_H_
#define VISMOE_ENGINE_MODEL_CHAT_TEMPLATE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/chat_message.h"
#include "engine/model/jinja/template.h"
#include "engine/model/model_config.h"
#include "engine/model/tokenizer.h"

namespace vismoe {

class ChatTemplate {
 public:
  // Looks the markers up by their Qwen names among the added tokens.
  static absl::StatusOr<ChatTemplate> Create(const Tokenizer& tokenizer);
  // Same, with vision markers from config.json (vision_start_token_id,
  // image_token_id, vision_end_token_id). A config without vision gives a
  // template that rejects image parts.
  static absl::StatusOr<ChatTemplate> Create(const Tokenizer& tokenizer, const ModelConfig& config);
  // The checkpoint directory's own template when it has one, else
  // Create(tokenizer, config). InvalidArgument naming the file for an
  // unreadable template or one using a construct the renderer lacks.
  static absl::StatusOr<ChatTemplate> Load(const std::string& dir, const Tokenizer& tokenizer,
                                           const ModelConfig& config);
  // Where the template came from: a file name, or "built-in ChatML".
  const std::string& source() const { return source_; }

  // Renders `messages`. Errors (InvalidArgument): no messages, a role other
  // than system/user/assistant, a system message that is not first, an image
  // part outside a user message or with a template that has no vision
  // markers; a Jinja template's own errors (raise_exception) with its line.
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     bool add_generation_prompt) const;

  // Where added tokens written in the text parts of `messages` may come from.
  enum class TextTokens {
    kPlain,         // encoded as ordinary text (untrusted callers)
    kAllowSpecial,  // recognised, as tokenizer.Encode(Render(...)) does (trusted callers)
  };

  // Token ids of the rendered prompt. Same errors as Render. With kPlain the
  // ids equal tokenizer.Encode(Render(...)) whenever the text parts contain
  // no added token, and otherwise differ only inside those parts.
  absl::StatusOr<std::vector<int>> Tokenize(const Tokenizer& tokenizer,
                                            const std::vector<ChatMessage>& messages,
                                            bool add_generation_prompt, TextTokens text) const;

  // Ids of the markers (the image pad is what the engine expands); -1 when
  // the tokenizer has none (im_start / im_end under a Jinja template).
  int im_start_id() const { return im_start_.id; }
  int im_end_id() const { return im_end_.id; }
  int image_pad_id() const { return image_pad_.id; }
  int vision_start_id() const { return vision_start_.id; }
  int vision_end_id() const { return vision_end_.id; }
  bool has_vision() const { return image_pad_.id >= 0; }

 private:
  struct Marker {
    int id = -1;
    std::string text;
  };
  // Rendered prompt: markers the template inserted (id >= 0) and runs of
  // other text (id -1; consecutive text is merged into one piece).
  using Pieces = std::vector<Marker>;
  absl::Status RenderPieces(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                            Pieces* out) const;
  absl::Status RenderMessage(const ChatMessage& m, size_t index, Pieces* out) const;
  // The Jinja template's rendering, untrusted ranges marked.
  absl::StatusOr<jinja::Str> RenderJinja(const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt) const;
  Marker im_start_, im_end_, vision_start_, image_pad_, vision_end_;
  std::shared_ptr<const jinja::Template> jinja_;  // null: built-in ChatML
  jinja::Dict special_tokens_;                    // bos_token, eos_token, ... as strings
  std::string source_ = "built-in ChatML";
};

}  // namespace vismoe

#endif  // VISMOE_ENGINE_MODEL_CHAT_TEMPLATE_H_
