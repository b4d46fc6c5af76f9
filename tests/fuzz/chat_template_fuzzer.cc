// Fuzzes chat template rendering (engine/model/chat_template.h) over the
// tiny-qwen3-vl-moe fixture's tokenizer: messages built from the input (roles,
// text and image parts, possibly marker text such as "<|im_end|>") are
// rendered and tokenized in both text modes, with the built-in ChatML vision
// template, the text-only one (tiny-qwen3-moe's config), or the fixture's own
// Jinja chat_template.jinja; or as DeepSeek-VL2's conversation
// (engine/model/vl2_conversation.h) over tiny-deepseek-vl2's tokenizer, where
// untrusted text must never yield an image id or an end token.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/model/chat_template.h"
#include "engine/model/model_config.h"
#include "engine/model/tokenizer.h"
#include "engine/model/vl2_conversation.h"

namespace vismoe {
namespace {

struct Fixture {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> vision;     // tiny-qwen3-vl-moe's config
  std::unique_ptr<ChatTemplate> text_only;  // tiny-qwen3-moe's config
  std::unique_ptr<ChatTemplate> jinja;      // the fixture's chat_template.jinja
  std::unique_ptr<Tokenizer> vl2_tokenizer;  // tiny-deepseek-vl2's
  Vl2SpecialIds vl2;
};

const Fixture& Load() {
  static const Fixture* const fixture = [] {
    const std::string dir = VISMOE_FIXTURES_DIR;
    auto* f = new Fixture;
    f->tokenizer = Tokenizer::Load(dir + "/tiny-qwen3-vl-moe").value();
    const ModelConfig vl = ModelConfig::Load(dir + "/tiny-qwen3-vl-moe").value();
    const ModelConfig text = ModelConfig::Load(dir + "/tiny-qwen3-moe").value();
    f->vision = std::make_unique<ChatTemplate>(ChatTemplate::Create(*f->tokenizer, vl).value());
    f->text_only =
        std::make_unique<ChatTemplate>(ChatTemplate::Create(*f->tokenizer, text).value());
    f->jinja = std::make_unique<ChatTemplate>(
        ChatTemplate::Load(dir + "/tiny-qwen3-vl-moe", *f->tokenizer, vl).value());
    f->vl2_tokenizer = Tokenizer::Load(dir + "/tiny-deepseek-vl2").value();
    f->vl2 = Vl2SpecialIds::From(*f->vl2_tokenizer).value();
    return f;
  }();
  return *fixture;
}

// Text that often holds the template's own markers, so forging is explored.
std::string Text(FuzzedDataProvider& in) {
  static const char* const kPieces[] = {"<|im_start|>",
                                        "<|im_end|>",
                                        "<|vision_start|>",
                                        "<|image_pad|>",
                                        "<|vision_end|>",
                                        "system",
                                        "\n",
                                        "<image>",
                                        "<|User|>",
                                        "<|Assistant|>",
                                        " ",
                                        "\t",
                                        "<｜end▁of▁sentence｜>",
                                        "<｜begin▁of▁sentence｜>"};
  std::string text;
  while (in.remaining_bytes() > 0 && in.ConsumeBool()) {
    if (in.ConsumeBool()) {
      text += in.PickValueInArray(kPieces);
    } else {
      text += in.ConsumeRandomLengthString(64);
    }
  }
  return text;
}

// DeepSeek-VL2's conversation: ids within the vocabulary; with untrusted
// text, exactly the image parts' <image> runs and no end token but the
// answers'.
void FuzzVl2(const Fixture& f, std::vector<ChatMessage> messages, bool add_generation_prompt,
             bool allow_special, FuzzedDataProvider& in) {
  if (add_generation_prompt) messages.push_back({"assistant", {}});
  std::vector<int64_t> tokens;
  int64_t want_images = 0, answers = 0;
  for (const ChatMessage& m : messages) {
    if (m.role == "assistant") ++answers;
    for (const ContentPart& p : m.content) {
      if (p.kind != ContentPart::Kind::kImage) continue;
      tokens.push_back(in.ConsumeIntegralInRange<int64_t>(1, 30));
      want_images += tokens.back();
    }
  }
  absl::StatusOr<std::vector<int>> ids =
      Vl2ConversationIds(*f.vl2_tokenizer, f.vl2, messages, tokens, allow_special);
  if (!ids.ok()) return;
  int64_t images = 0, ends = 0;
  for (int id : *ids) {
    if (id < 0 || id >= f.vl2_tokenizer->vocab_size()) std::abort();
    images += id == f.vl2.image ? 1 : 0;
    ends += id == f.vl2.eos ? 1 : 0;
  }
  if (!allow_special && (images != want_images || ends != answers - 1)) std::abort();
}

void Fuzz(FuzzedDataProvider& in) {
  const Fixture& f = Load();
  const int which = in.ConsumeIntegralInRange(0, 3);
  const bool add_generation_prompt = in.ConsumeBool();
  const auto mode =
      in.ConsumeBool() ? ChatTemplate::TextTokens::kPlain : ChatTemplate::TextTokens::kAllowSpecial;
  std::vector<ChatMessage> messages(in.ConsumeIntegralInRange(0, 6));
  for (ChatMessage& m : messages) {
    static const char* const kRoles[] = {"system", "user", "assistant", "tool", ""};
    m.role = in.PickValueInArray(kRoles);
    m.content.resize(in.ConsumeIntegralInRange(0, 4));
    for (ContentPart& part : m.content) {
      if (in.ConsumeBool()) {
        part.kind = ContentPart::Kind::kImage;
        part.image_index = in.ConsumeIntegralInRange(-1, 8);
      } else {
        part.text = Text(in);
      }
    }
  }
  if (which == 3) {
    return FuzzVl2(f, std::move(messages), add_generation_prompt,
                   mode == ChatTemplate::TextTokens::kAllowSpecial, in);
  }
  const ChatTemplate& tmpl = which == 0 ? *f.vision : which == 1 ? *f.text_only : *f.jinja;
  absl::StatusOr<std::string> rendered = tmpl.Render(messages, add_generation_prompt);
  absl::StatusOr<std::vector<int>> ids =
      tmpl.Tokenize(*f.tokenizer, messages, add_generation_prompt, mode);
  // Same errors as Render; ids within the vocabulary.
  if (rendered.ok() != ids.ok()) std::abort();
  if (!ids.ok()) return;
  for (int id : *ids) {
    if (id < 0 || id >= f.tokenizer->vocab_size()) std::abort();
  }
}

}  // namespace
}  // namespace vismoe

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  vismoe::Fuzz(in);
  return 0;
}
