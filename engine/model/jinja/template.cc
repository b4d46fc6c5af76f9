#include "engine/model/jinja/template.h"

#include "engine/model/jinja/lexer.h"
#include "engine/model/jinja/parser.h"
#include "engine/model/jinja/renderer.h"

namespace vismoe::jinja {

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  auto chunks = Lex(source);
  if (!chunks.ok()) return chunks.status();
  auto body = jinja::Parse(*std::move(chunks));
  if (!body.ok()) return body.status();
  Template t;
  t.body_ = std::make_shared<const Body>(*std::move(body));
  return t;
}

absl::StatusOr<Str> Template::Render(const Value& context) const {
  return jinja::Render(*body_, context);
}

}  // namespace vismoe::jinja
