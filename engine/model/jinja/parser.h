// Parses a lexed Jinja template into statements (engine/model/jinja/ast.h).
// The subset is what Hugging Face chat templates use: if / elif / else, for
// (with else, loop filters, tuple targets), set (names, namespace attributes,
// blocks), macro, break, continue, generation, comments, the full expression
// grammar with filters and tests. Anything else -- another tag, an unknown
// filter, test or operator -- is an InvalidArgument naming the construct and
// its line, so a template is refused when it is loaded, never rendered wrongly.
// Thread safety: pure function.
#ifndef VISMOE_ENGINE_MODEL_JINJA_PARSER_H_
#define VISMOE_ENGINE_MODEL_JINJA_PARSER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/jinja/ast.h"
#include "engine/model/jinja/lexer.h"

namespace vismoe::jinja {

absl::StatusOr<Body> Parse(std::vector<Chunk> chunks);

// The filters and tests the renderer implements (the parser refuses others).
bool IsKnownFilter(const std::string& name);
bool IsKnownTest(const std::string& name);

}  // namespace vismoe::jinja

#endif  // VISMOE_ENGINE_MODEL_JINJA_PARSER_H_
