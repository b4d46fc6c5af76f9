// Renders a parsed Jinja template (engine/model/jinja/parser.h) over a
// context of variables, as jinja2's ImmutableSandboxedEnvironment does for
// transformers' apply_chat_template: Python semantics for values and
// operators, Jinja's scoping (a for loop's sets stay inside it; namespaces
// carry state out), the loop object, macros, the filters, tests and string /
// dict methods that chat templates call, and transformers' globals
// raise_exception and strftime_now.
// Thread safety: Render is reentrant; a Body may be rendered concurrently.
#ifndef VISMOE_ENGINE_MODEL_JINJA_RENDERER_H_
#define VISMOE_ENGINE_MODEL_JINJA_RENDERER_H_

#include "absl/status/statusor.h"
#include "engine/model/jinja/ast.h"
#include "engine/model/jinja/value.h"

namespace vismoe::jinja {

// Renders `body` with the variables of `context` (a dict). Errors are
// InvalidArgument naming the template line: raise_exception's message, type
// errors, undefined attributes of undefined values, and the like.
absl::StatusOr<Str> Render(const Body& body, const Value& context);

}  // namespace vismoe::jinja

#endif  // VISMOE_ENGINE_MODEL_JINJA_RENDERER_H_
