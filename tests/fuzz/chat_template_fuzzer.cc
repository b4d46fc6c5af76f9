// Fuzzes chat template rendering (engine/model/chat_template.h) over the
// tiny-qwen3-vl-moe fixture's tokenizer: messages built from the input (roles,
// text and image parts, possibly marker text such as "<|im_end|>") are
// rendered and tokenized in both text modes, with the built-in ChatML vision
// template, the text-only one (tiny-qwen3-moe's config), or the fixture's own
// Jinja chat_template.jinja.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/model/chat_template.h"
#include "engine/model/model_config.h"
#include "engine/model/tokenizer.h"

namespace vismoe {
namespace {

struct Fixture {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> vision;     // tiny-qwen3-vl-moe's config
  std::unique_ptr<ChatTemplate> text_only;  // tiny-qwen3-moe's config
  std::unique_ptr<ChatTemplate> jinja;      // the fixture's chat_template.jinja
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
    return f;
  }();
  return *fixture;
}

// Text that often holds the template's own markers, so forging is explored.
std::string Text(FuzzedDataProvider& in) {
  static const char* const kPieces[] = {"<|im_start|>", "<|im_end|>", "<|vision_start|>",
                                        "<|image_pad|>", "<|vision_end|>", "system", "\n"};
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

void Fuzz(FuzzedDataProvider& in) {
  const Fixture& f = Load();
  const int which = in.ConsumeIntegralInRange(0, 2);
  const ChatTemplate& tmpl = which == 0 ? *f.vision : which == 1 ? *f.text_only : *f.jinja;
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
