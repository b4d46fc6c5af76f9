// A Jinja2 template of the subset Hugging Face chat templates use, parsed
// once and rendered many times (engine/model/jinja: lexer, parser, renderer,
// builtins). Rendering follows jinja2 as transformers' apply_chat_template
// configures it (trim_blocks, lstrip_blocks, loop controls, the generation
// tag, raise_exception and strftime_now). What the subset lacks fails at
// Parse naming the construct and line; nothing is silently rendered wrongly.
// Thread safety: immutable after Parse; Render may run concurrently.
#ifndef VISMOE_ENGINE_MODEL_JINJA_TEMPLATE_H_
#define VISMOE_ENGINE_MODEL_JINJA_TEMPLATE_H_

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/model/jinja/ast.h"
#include "engine/model/jinja/value.h"

namespace vismoe::jinja {

class Template {
 public:
  // InvalidArgument "chat template line N: ..." for syntax errors and
  // unsupported tags, filters and tests.
  static absl::StatusOr<Template> Parse(std::string_view source);

  // Renders with `context` (a dict of variables). InvalidArgument naming the
  // line on runtime errors (raise_exception included).
  absl::StatusOr<Str> Render(const Value& context) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace vismoe::jinja

#endif  // VISMOE_ENGINE_MODEL_JINJA_TEMPLATE_H_
