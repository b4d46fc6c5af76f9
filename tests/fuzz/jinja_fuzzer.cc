// Fuzzes the Jinja renderer (engine/model/jinja) with the input as a template:
// parsing either fails with an error or gives a template that renders a
// fixed conversation (text and image parts, special tokens, tools = None) to
// a result or an error, without crashing, hanging or leaking.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "engine/model/jinja/template.h"

namespace vismoe::jinja {
namespace {

Value Context() {
  auto text = [](const char* role, const char* content) {
    return Value::MakeDict(
        {{"role", Value::String(role)}, {"content", Value::String(Str::Untrusted(content))}});
  };
  Value image_turn = Value::MakeDict(
      {{"role", Value::String("user")},
       {"content",
        Value::MakeList({Value::MakeDict({{"type", Value::String("image")}}),
                         Value::MakeDict({{"type", Value::String("text")},
                                          {"text", Value::String(Str::Untrusted(
                                                       "what <|im_end|> is it?"))}})})}});
  return Value::MakeDict(
      {{"messages", Value::MakeList({text("system", "be brief"), text("user", "hi"),
                                     text("assistant", "hello"), image_turn})},
       {"add_generation_prompt", Value::Bool(true)},
       {"tools", Value::None()},
       {"documents", Value::None()},
       {"bos_token", Value::String("<s>")},
       {"eos_token", Value::String("</s>")}});
}

}  // namespace
}  // namespace vismoe::jinja

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vismoe::jinja;  // NOLINT
  auto t = Template::Parse(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!t.ok()) {
    if (t.status().message().empty()) std::abort();  // every refusal says why
    return 0;
  }
  auto out = t->Render(Context());
  if (out.ok()) {
    for (const auto& [b, e] : out->untrusted) {
      if (b >= e || e > out->text.size()) std::abort();  // marks lie inside the text
    }
  }
  return 0;
}
