#include "engine/model/jinja/lexer.h"

#include <cctype>
#include <charconv>

#include "absl/strings/str_cat.h"
#include "engine/model/utf8.h"

namespace vismoe::jinja {
namespace {

absl::Status Error(int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("chat template line ", line, ": ", what));
}

int LineAt(std::string_view s, size_t pos) {
  int line = 1;
  for (size_t i = 0; i < pos && i < s.size(); ++i) line += s[i] == '\n';
  return line;
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// A Python string literal starting at s[i] (a quote); returns its value and
// moves i past it.
absl::StatusOr<std::string> StringLiteral(std::string_view s, size_t* i, int line) {
  const char q = s[*i];
  std::string out;
  for (size_t p = *i + 1; p < s.size(); ++p) {
    const char c = s[p];
    if (c == q) {
      *i = p + 1;
      return out;
    }
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++p >= s.size()) break;
    const char e = s[p];
    switch (e) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case '0':
        out += '\0';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case '\n':
        break;  // line continuation
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        if (p + n >= s.size()) return Error(line, "truncated escape in a string");
        auto r = std::from_chars(s.data() + p + 1, s.data() + p + 1 + n, cp, 16);
        if (r.ec != std::errc() || r.ptr != s.data() + p + 1 + n) {
          return Error(line, "bad escape in a string");
        }
        if (cp > 0x10FFFF) return Error(line, "escape beyond U+10FFFF in a string");
        utf8::AppendCodePoint(cp, &out);
        p += n;
        break;
      }
      default:  // Python keeps unknown escapes as written
        out += '\\';
        out += e;
    }
  }
  return Error(line, "unterminated string literal");
}

// The tokens of a tag's contents.
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view s, int line) {
  static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                     "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                     "]",  "{",  "}",  ",",  ".",  ":",  "|"};
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '\n') ++line;
    if (IsSpace(c)) {
      ++i;
      continue;
    }
    Token t{Token::Kind::kOp, "", 0, 0, line};
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      t.kind = Token::Kind::kName;
      t.text = std::string(s.substr(i, j - i));
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      bool is_float = false;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        is_float = true;
        ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      }
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) {
          is_float = true;
          j = k;
          while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
        }
      }
      std::string digits;
      for (size_t k = i; k < j; ++k) {
        if (s[k] != '_') digits += s[k];
      }
      if (is_float) {
        t.kind = Token::Kind::kFloat;
        t.float_value = std::stod(digits);
      } else {
        t.kind = Token::Kind::kInt;
        auto r = std::from_chars(digits.data(), digits.data() + digits.size(), t.int_value);
        if (r.ec != std::errc())
          return Error(line, absl::StrCat("integer ", digits, " out of range"));
      }
      t.text = digits;
      i = j;
    } else if (c == '\'' || c == '"') {
      auto value = StringLiteral(s, &i, line);
      if (!value.ok()) return value.status();
      t.kind = Token::Kind::kString;
      t.text = *std::move(value);
    } else {
      for (const char* op : kOps) {
        if (s.substr(i).starts_with(op)) {
          t.text = op;
          break;
        }
      }
      if (t.text.empty())
        return Error(line, absl::StrCat("unexpected character '", std::string(1, c), "'"));
      i += t.text.size();
    }
    out.push_back(std::move(t));
  }
  return out;
}

// The end of a tag whose contents start at `from`: the position of `close`
// outside string literals, or npos.
size_t TagEnd(std::string_view s, size_t from, std::string_view close) {
  for (size_t i = from; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '\'' || c == '"') {
      for (++i; i < s.size() && s[i] != c; ++i) {
        if (s[i] == '\\') ++i;
      }
      continue;
    }
    if (s.substr(i).starts_with(close)) return i;
  }
  return std::string_view::npos;
}

}  // namespace

absl::StatusOr<std::vector<Chunk>> Lex(std::string_view s) {
  std::vector<Chunk> out;
  // As Jinja's lexer: whether the previous tag's match ended with a newline
  // (lstrip_blocks then strips a tag's indentation even without one in the text).
  bool line_starting = true;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t open = std::string_view::npos;
    for (size_t i = pos; i + 1 < s.size(); ++i) {
      if (s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')) {
        open = i;
        break;
      }
    }
    if (open == std::string_view::npos) {
      if (pos < s.size()) {
        out.push_back({Chunk::Kind::kText, std::string(s.substr(pos)), {}, LineAt(s, pos)});
      }
      break;
    }
    const char kind = s[open + 1];
    size_t body = open + 2;
    const char sign = body < s.size() && (s[body] == '-' || s[body] == '+') ? s[body] : 0;
    if (sign != 0) ++body;
    const bool block = kind != '{';  // statements and comments
    std::string text(s.substr(pos, open - pos));
    if (sign == '-') {
      while (!text.empty() && IsSpace(text.back())) text.pop_back();
    } else if (sign != '+' && block) {
      const size_t l_pos = text.rfind('\n') + 1;  // 0 when there is none
      if (l_pos > 0 || line_starting) {
        bool blank = true;
        for (size_t k = l_pos; k < text.size(); ++k) blank &= IsSpace(text[k]);
        if (blank) text.erase(l_pos);
      }
    }
    const int line = LineAt(s, open);
    if (!text.empty()) out.push_back({Chunk::Kind::kText, std::move(text), {}, LineAt(s, pos)});
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t end = kind == '#' ? s.find(close, body) : TagEnd(s, body, close);
    if (end == std::string_view::npos) {
      return Error(line, kind == '#' ? "unterminated comment" : "unterminated tag");
    }
    const bool minus_right = end > body && s[end - 1] == '-';
    const std::string_view inner = s.substr(body, end - body - (minus_right ? 1 : 0));
    pos = end + 2;
    // The tag's end: "-" eats all whitespace after it, trim_blocks one newline
    // after a statement or comment.
    size_t eaten = pos;
    if (minus_right) {
      while (eaten < s.size() && IsSpace(s[eaten])) ++eaten;
    } else if (block && eaten < s.size() && s[eaten] == '\n') {
      ++eaten;
    }
    line_starting = eaten > pos ? s[eaten - 1] == '\n' : false;
    pos = eaten;
    if (kind == '#') continue;
    auto tokens = Tokenize(inner, line);
    if (!tokens.ok()) return tokens.status();
    out.push_back(
        {kind == '{' ? Chunk::Kind::kExpr : Chunk::Kind::kStmt, "", *std::move(tokens), line});
    if (pos >= s.size()) break;
  }
  return out;
}

}  // namespace vismoe::jinja
