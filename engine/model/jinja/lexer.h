// Splits a Jinja template into text and tags, with the whitespace rules of
// transformers' chat-template environment (trim_blocks and lstrip_blocks on,
// "-" and "+" modifiers), and tag contents into tokens.
// Thread safety: pure functions.
#ifndef VISMOE_ENGINE_MODEL_JINJA_LEXER_H_
#define VISMOE_ENGINE_MODEL_JINJA_LEXER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace vismoe::jinja {

struct Token {
  enum class Kind { kName, kString, kInt, kFloat, kOp };
  Kind kind;
  std::string text;  // name, operator, or the string literal's value
  int64_t int_value = 0;
  double float_value = 0;
  int line = 0;
};

struct Chunk {
  enum class Kind { kText, kExpr, kStmt };
  Kind kind;
  std::string text;           // kText
  std::vector<Token> tokens;  // kExpr, kStmt
  int line = 0;
};

// InvalidArgument naming the line for an unterminated tag, comment or string,
// or a character no token starts with.
absl::StatusOr<std::vector<Chunk>> Lex(std::string_view source);

}  // namespace vismoe::jinja

#endif  // VISMOE_ENGINE_MODEL_JINJA_LEXER_H_
