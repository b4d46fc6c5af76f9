#include "engine/model/jinja/parser.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace vismoe::jinja {
namespace {

absl::Status Error(int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("chat template line ", line, ": ", what));
}

// Nesting deeper than any template needs is refused before it can exhaust
// the stack (the parser and the renderer recurse over it).
constexpr int kMaxNesting = 100;

#define JINJA_TRY(expr)       \
  do {                        \
    absl::Status _s = (expr); \
    if (!_s.ok()) return _s;  \
  } while (0)

// Expressions of one tag.
class ExprParser {
 public:
  ExprParser(const std::vector<Token>& tokens, size_t start, int line)
      : t_(tokens), i_(start), line_(line) {}

  bool AtEnd() const { return i_ >= t_.size(); }
  size_t pos() const { return i_; }
  int line() const { return AtEnd() ? line_ : t_[i_].line; }
  bool PeekOp(std::string_view op) const {
    return !AtEnd() && t_[i_].kind == Token::Kind::kOp && t_[i_].text == op;
  }
  bool PeekName(std::string_view name, size_t ahead = 0) const {
    return i_ + ahead < t_.size() && t_[i_ + ahead].kind == Token::Kind::kName &&
           t_[i_ + ahead].text == name;
  }
  bool TakeOp(std::string_view op) {
    if (!PeekOp(op)) return false;
    ++i_;
    return true;
  }
  bool TakeName(std::string_view name) {
    if (!PeekName(name)) return false;
    ++i_;
    return true;
  }
  absl::Status ExpectOp(std::string_view op) {
    if (TakeOp(op)) return absl::OkStatus();
    return Error(line(), absl::StrCat("expected '", std::string(op), "', got ", Describe()));
  }
  absl::StatusOr<std::string> Identifier() {
    if (AtEnd() || t_[i_].kind != Token::Kind::kName) {
      return Error(line(), absl::StrCat("expected a name, got ", Describe()));
    }
    return t_[i_++].text;
  }
  std::string Describe() const {
    return AtEnd() ? "the end of the tag" : absl::StrCat("'", t_[i_].text, "'");
  }
  absl::Status ExpectEnd() {
    if (AtEnd()) return absl::OkStatus();
    return Error(line(), absl::StrCat("unexpected ", Describe()));
  }

  // expression: conditional, or an unparenthesised tuple when `tuples`.
  absl::StatusOr<ExprPtr> Expression(bool tuples = false) {
    if (++depth_ > kMaxNesting) return Error(line(), "expressions nest too deep");
    auto result = ExpressionAt(tuples);
    --depth_;
    return result;
  }

 private:
  absl::StatusOr<ExprPtr> ExpressionAt(bool tuples) {
    auto first = Conditional();
    if (!first.ok() || !tuples || !PeekOp(",")) return first;
    auto tuple = Node(Expr::Kind::kTuple);
    tuple->children.push_back(*std::move(first));
    while (TakeOp(",")) {
      if (AtEnd() || PeekOp(")") || PeekOp("]")) break;
      auto next = Conditional();
      if (!next.ok()) return next.status();
      tuple->children.push_back(*std::move(next));
    }
    return tuple;
  }

  ExprPtr Node(Expr::Kind kind) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line();
    return e;
  }
  ExprPtr Binary(std::string op, ExprPtr a, ExprPtr b) {
    auto e = Node(Expr::Kind::kBinary);
    e->name = std::move(op);
    e->children.push_back(std::move(a));
    e->children.push_back(std::move(b));
    return e;
  }

  absl::StatusOr<ExprPtr> Conditional() {
    auto then = Or();
    if (!then.ok()) return then;
    while (TakeName("if")) {
      auto cond = Node(Expr::Kind::kCond);
      auto test = Or();
      if (!test.ok()) return test;
      ExprPtr otherwise;
      if (TakeName("else")) {
        auto e = Conditional();
        if (!e.ok()) return e;
        otherwise = *std::move(e);
      }
      cond->children.push_back(*std::move(then));
      cond->children.push_back(*std::move(test));
      cond->children.push_back(std::move(otherwise));
      then = std::move(cond);
    }
    return then;
  }
  absl::StatusOr<ExprPtr> Or() {
    auto a = And();
    while (a.ok() && TakeName("or")) {
      auto b = And();
      if (!b.ok()) return b;
      a = Binary("or", *std::move(a), *std::move(b));
    }
    return a;
  }
  absl::StatusOr<ExprPtr> And() {
    auto a = Not();
    while (a.ok() && TakeName("and")) {
      auto b = Not();
      if (!b.ok()) return b;
      a = Binary("and", *std::move(a), *std::move(b));
    }
    return a;
  }
  absl::StatusOr<ExprPtr> Not() {
    if (TakeName("not")) {
      if (++depth_ > kMaxNesting) return Error(line(), "expressions nest too deep");
      auto e = Node(Expr::Kind::kUnary);
      e->name = "not";
      auto operand = Not();
      --depth_;
      if (!operand.ok()) return operand;
      e->children.push_back(*std::move(operand));
      return e;
    }
    return Compare();
  }
  absl::StatusOr<ExprPtr> Compare() {
    auto a = Math1();
    if (!a.ok()) return a;
    // Chains (a < b < c) compare pairwise, joined by "and" over shared operands;
    // templates use single comparisons, so a chain is refused.
    std::string op;
    if (PeekOp("==") || PeekOp("!=") || PeekOp("<") || PeekOp("<=") || PeekOp(">") ||
        PeekOp(">=")) {
      op = t_[i_++].text;
    } else if (TakeName("in")) {
      op = "in";
    } else if (PeekName("not") && PeekName("in", 1)) {
      i_ += 2;
      op = "not in";
    } else {
      return a;
    }
    auto b = Math1();
    if (!b.ok()) return b;
    if (PeekOp("==") || PeekOp("!=") || PeekOp("<") || PeekOp("<=") || PeekOp(">") ||
        PeekOp(">=") || PeekName("in")) {
      return Error(line(), "chained comparisons are not supported");
    }
    return Binary(op, *std::move(a), *std::move(b));
  }
  absl::StatusOr<ExprPtr> Math1() {
    auto a = Concat();
    while (a.ok() && (PeekOp("+") || PeekOp("-"))) {
      std::string op = t_[i_++].text;
      auto b = Concat();
      if (!b.ok()) return b;
      a = Binary(op, *std::move(a), *std::move(b));
    }
    return a;
  }
  absl::StatusOr<ExprPtr> Concat() {
    auto a = Math2();
    while (a.ok() && TakeOp("~")) {
      auto b = Math2();
      if (!b.ok()) return b;
      a = Binary("~", *std::move(a), *std::move(b));
    }
    return a;
  }
  absl::StatusOr<ExprPtr> Math2() {
    auto a = Pow();
    while (a.ok() && (PeekOp("*") || PeekOp("/") || PeekOp("//") || PeekOp("%"))) {
      std::string op = t_[i_++].text;
      auto b = Pow();
      if (!b.ok()) return b;
      a = Binary(op, *std::move(a), *std::move(b));
    }
    return a;
  }
  absl::StatusOr<ExprPtr> Pow() {
    auto a = Unary();
    while (a.ok() && TakeOp("**")) {
      auto b = Unary();
      if (!b.ok()) return b;
      a = Binary("**", *std::move(a), *std::move(b));
    }
    return a;
  }
  // As jinja2: "-3 | abs" filters the negation; the operand takes no filters.
  absl::StatusOr<ExprPtr> Unary(bool with_filters = true) {
    ExprPtr e;
    if (PeekOp("-") || PeekOp("+")) {
      if (++depth_ > kMaxNesting) return Error(line(), "expressions nest too deep");
      e = Node(Expr::Kind::kUnary);
      e->name = t_[i_++].text;
      auto operand = Unary(false);
      --depth_;
      if (!operand.ok()) return operand;
      e->children.push_back(*std::move(operand));
    } else {
      auto p = Primary();
      if (!p.ok()) return p;
      auto post = Postfix(*std::move(p));
      if (!post.ok()) return post;
      e = *std::move(post);
    }
    return with_filters ? FilterTail(std::move(e)) : absl::StatusOr<ExprPtr>(std::move(e));
  }

  absl::Status Arguments(Expr* call) {
    // After "(": positional and keyword arguments up to ")". children[0] is
    // the callee, the filtered or the tested value.
    const size_t first = call->children.size();
    while (!TakeOp(")")) {
      if (call->children.size() > first || !call->keywords.empty()) JINJA_TRY(ExpectOp(","));
      if (TakeOp(")")) break;  // trailing comma
      if (!AtEnd() && t_[i_].kind == Token::Kind::kName && i_ + 1 < t_.size() &&
          t_[i_ + 1].kind == Token::Kind::kOp && t_[i_ + 1].text == "=") {
        std::string key = t_[i_].text;
        i_ += 2;
        auto v = Expression();
        if (!v.ok()) return v.status();
        call->keywords.emplace_back(std::move(key), *std::move(v));
        continue;
      }
      if (!call->keywords.empty()) return Error(line(), "positional argument after a keyword one");
      auto v = Expression();
      if (!v.ok()) return v.status();
      call->children.push_back(*std::move(v));
      if (AtEnd()) return Error(line(), "unterminated argument list");
    }
    return absl::OkStatus();
  }

  // Filters and tests after a unary expression.
  absl::StatusOr<ExprPtr> FilterTail(ExprPtr e) {
    while (true) {
      if (TakeOp("|")) {
        auto f = Node(Expr::Kind::kFilter);
        auto name = Identifier();
        if (!name.ok()) return name.status();
        if (!IsKnownFilter(*name))
          return Error(f->line, absl::StrCat("unsupported filter '", *name, "'"));
        f->name = *name;
        f->children.push_back(std::move(e));
        if (TakeOp("(")) JINJA_TRY(Arguments(f.get()));
        e = std::move(f);
      } else if (TakeName("is")) {
        auto t = Node(Expr::Kind::kTest);
        t->negated = TakeName("not");
        auto name = Identifier();
        if (!name.ok()) return name.status();
        if (!IsKnownTest(*name))
          return Error(t->line, absl::StrCat("unsupported test '", *name, "'"));
        t->name = *name;
        t->children.push_back(std::move(e));
        if (TakeOp("(")) {
          JINJA_TRY(Arguments(t.get()));
        } else if (TestArgumentFollows()) {
          auto arg = Primary();  // "is divisibleby 3", "is in ['a']", "is sameas none"
          if (!arg.ok()) return arg;
          auto post = Postfix(*std::move(arg));
          if (!post.ok()) return post;
          t->children.push_back(*std::move(post));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  // As jinja2's parse_test: a literal, name, list or dict after the test name
  // is its one argument, unless it is "else", "or" or "and".
  bool TestArgumentFollows() const {
    if (AtEnd()) return false;
    const Token& t = t_[i_];
    if (t.kind == Token::Kind::kName) return t.text != "else" && t.text != "or" && t.text != "and";
    if (t.kind == Token::Kind::kOp) return t.text == "[" || t.text == "{";
    return true;
  }

  absl::StatusOr<ExprPtr> Postfix(ExprPtr e) {
    while (true) {
      if (TakeOp(".")) {
        auto a = Node(Expr::Kind::kAttr);
        if (!AtEnd() && t_[i_].kind == Token::Kind::kInt) {  // tuple.0
          a->kind = Expr::Kind::kItem;
          auto idx = Node(Expr::Kind::kLiteral);
          idx->value = Value::Int(t_[i_++].int_value);
          a->children.push_back(std::move(e));
          a->children.push_back(std::move(idx));
          e = std::move(a);
          continue;
        }
        auto name = Identifier();
        if (!name.ok()) return name.status();
        a->name = *name;
        a->children.push_back(std::move(e));
        e = std::move(a);
      } else if (TakeOp("[")) {
        auto parts = Node(Expr::Kind::kSlice);
        parts->children.push_back(std::move(e));
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (PeekOp(":") || PeekOp("]")) {
            parts->children.push_back(nullptr);
          } else {
            auto v = Expression();
            if (!v.ok()) return v;
            parts->children.push_back(*std::move(v));
          }
          if (TakeOp(":")) {
            slice = true;
            continue;
          }
          break;
        }
        JINJA_TRY(ExpectOp("]"));
        if (!slice) {
          parts->kind = Expr::Kind::kItem;
          parts->children.resize(2);
          if (parts->children[1] == nullptr) return Error(parts->line, "empty subscript");
        } else {
          parts->children.resize(4);
        }
        e = std::move(parts);
      } else if (TakeOp("(")) {
        auto call = Node(Expr::Kind::kCall);
        call->children.push_back(std::move(e));
        JINJA_TRY(Arguments(call.get()));
        e = std::move(call);
      } else {
        return e;
      }
    }
  }

  absl::StatusOr<ExprPtr> Primary() {
    if (AtEnd()) return Error(line(), "expected an expression, got the end of the tag");
    const Token& t = t_[i_];
    auto e = Node(Expr::Kind::kLiteral);
    switch (t.kind) {
      case Token::Kind::kString: {
        std::string s = t.text;
        ++i_;
        while (!AtEnd() && t_[i_].kind == Token::Kind::kString) s += t_[i_++].text;  // "a" "b"
        e->value = Value::String(std::move(s));
        return e;
      }
      case Token::Kind::kInt:
        e->value = Value::Int(t.int_value);
        ++i_;
        return e;
      case Token::Kind::kFloat:
        e->value = Value::Float(t.float_value);
        ++i_;
        return e;
      case Token::Kind::kName:
        ++i_;
        if (t.text == "true" || t.text == "True") {
          e->value = Value::Bool(true);
        } else if (t.text == "false" || t.text == "False") {
          e->value = Value::Bool(false);
        } else if (t.text == "none" || t.text == "None") {
          e->value = Value::None();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        return e;
      case Token::Kind::kOp:
        break;
    }
    if (TakeOp("(")) {
      if (TakeOp(")")) {
        e->kind = Expr::Kind::kTuple;
        return e;
      }
      auto inner = Expression(true);
      if (!inner.ok()) return inner;
      JINJA_TRY(ExpectOp(")"));
      return inner;
    }
    if (TakeOp("[")) {
      e->kind = Expr::Kind::kList;
      while (!TakeOp("]")) {
        if (!e->children.empty()) JINJA_TRY(ExpectOp(","));
        if (TakeOp("]")) break;
        auto v = Expression();
        if (!v.ok()) return v;
        e->children.push_back(*std::move(v));
        if (AtEnd()) return Error(line(), "unterminated list");
      }
      return e;
    }
    if (TakeOp("{")) {
      e->kind = Expr::Kind::kDict;
      while (!TakeOp("}")) {
        if (!e->children.empty()) JINJA_TRY(ExpectOp(","));
        if (TakeOp("}")) break;
        auto k = Expression();
        if (!k.ok()) return k;
        JINJA_TRY(ExpectOp(":"));
        auto v = Expression();
        if (!v.ok()) return v;
        e->children.push_back(*std::move(k));
        e->children.push_back(*std::move(v));
        if (AtEnd()) return Error(line(), "unterminated dict");
      }
      return e;
    }
    return Error(line(), absl::StrCat("unexpected ", Describe()));
  }

  const std::vector<Token>& t_;
  size_t i_;
  int line_;
  int depth_ = 0;
};

// Statements over the chunk sequence.
class StmtParser {
 public:
  explicit StmtParser(std::vector<Chunk> chunks) : c_(std::move(chunks)) {}

  // Parses statements until one of `ends` (a tag name) or the end; `*end` gets
  // the tag that stopped it ("" at the end of the template).
  absl::Status ParseBody(const std::vector<std::string>& ends, Body* out, std::string* end) {
    while (i_ < c_.size()) {
      Chunk& c = c_[i_];
      if (c.kind == Chunk::Kind::kText) {
        auto s = NewStmt(Stmt::Kind::kText, c.line);
        s->text = std::move(c.text);
        out->push_back(std::move(s));
        ++i_;
        continue;
      }
      if (c.kind == Chunk::Kind::kExpr) {
        ExprParser p(c.tokens, 0, c.line);
        auto e = p.Expression(true);
        if (!e.ok()) return e.status();
        JINJA_TRY(p.ExpectEnd());
        auto s = NewStmt(Stmt::Kind::kEmit, c.line);
        s->expr = *std::move(e);
        out->push_back(std::move(s));
        ++i_;
        continue;
      }
      if (c.tokens.empty() || c.tokens[0].kind != Token::Kind::kName) {
        return Error(c.line, "empty or malformed statement tag");
      }
      const std::string& tag = c.tokens[0].text;
      for (const std::string& e : ends) {
        if (tag == e) {
          *end = tag;
          return absl::OkStatus();
        }
      }
      JINJA_TRY(Statement(out));
    }
    if (!ends.empty()) {
      return Error(c_.empty() ? 0 : c_.back().line,
                   absl::StrCat("missing {% ", ends.back(), " %} at the end of the template"));
    }
    *end = "";
    return absl::OkStatus();
  }

 private:
  static std::unique_ptr<Stmt> NewStmt(Stmt::Kind kind, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = line;
    return s;
  }

  // The tag at i_ must be exactly `name` (an end tag).
  absl::Status EndTag(const std::string& name) {
    const Chunk& c = c_[i_];
    if (c.tokens.size() != 1) return Error(c.line, absl::StrCat("{% ", name, " %} takes nothing"));
    ++i_;
    return absl::OkStatus();
  }

  absl::Status Statement(Body* out) {
    const Chunk& c = c_[i_];
    if (depth_ >= kMaxNesting) return Error(c.line, "blocks nest too deep");
    ++depth_;
    absl::Status s = StatementAt(out);
    --depth_;
    return s;
  }

  absl::Status StatementAt(Body* out) {
    const Chunk& c = c_[i_];
    const std::string tag = c.tokens[0].text;
    ExprParser p(c.tokens, 1, c.line);
    if (tag == "if") return If(p, out);
    if (tag == "for") return For(p, out);
    if (tag == "set") return Set(p, out);
    if (tag == "macro") return Macro(p, out);
    if (tag == "break" || tag == "continue") {
      JINJA_TRY(p.ExpectEnd());
      out->push_back(NewStmt(tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, c.line));
      ++i_;
      return absl::OkStatus();
    }
    if (tag == "generation") {
      JINJA_TRY(p.ExpectEnd());
      ++i_;
      auto s = NewStmt(Stmt::Kind::kBlock, c.line);
      s->bodies.emplace_back();
      std::string end;
      JINJA_TRY(ParseBody({"endgeneration"}, &s->bodies[0], &end));
      JINJA_TRY(EndTag(end));
      out->push_back(std::move(s));
      return absl::OkStatus();
    }
    return Error(c.line, absl::StrCat("unsupported tag '", tag, "'"));
  }

  absl::Status If(ExprParser& p, Body* out) {
    auto s = NewStmt(Stmt::Kind::kIf, c_[i_].line);
    auto cond = p.Expression();
    if (!cond.ok()) return cond.status();
    JINJA_TRY(p.ExpectEnd());
    s->conditions.push_back(*std::move(cond));
    ++i_;
    while (true) {
      s->bodies.emplace_back();
      std::string end;
      JINJA_TRY(ParseBody({"elif", "else", "endif"}, &s->bodies.back(), &end));
      const Chunk& c = c_[i_];
      if (end == "endif") {
        JINJA_TRY(EndTag(end));
        break;
      }
      if (end == "else") {
        JINJA_TRY(EndTag(end));
        s->bodies.emplace_back();
        JINJA_TRY(ParseBody({"endif"}, &s->bodies.back(), &end));
        JINJA_TRY(EndTag(end));
        break;
      }
      ExprParser q(c.tokens, 1, c.line);
      auto next = q.Expression();
      if (!next.ok()) return next.status();
      JINJA_TRY(q.ExpectEnd());
      s->conditions.push_back(*std::move(next));
      ++i_;
    }
    out->push_back(std::move(s));
    return absl::OkStatus();
  }

  absl::Status For(ExprParser& p, Body* out) {
    auto s = NewStmt(Stmt::Kind::kFor, c_[i_].line);
    do {
      auto name = p.Identifier();
      if (!name.ok()) return name.status();
      s->targets.push_back(*name);
    } while (p.TakeOp(","));
    if (!p.TakeName("in")) return Error(p.line(), "expected 'in' in a for tag");
    auto iter = p.Expression();  // no tuples: "for x in a if c" filters
    if (!iter.ok()) return iter.status();
    s->expr = *std::move(iter);
    if (s->expr->kind == Expr::Kind::kCond && s->expr->children[2] == nullptr) {
      // "for x in items if cond": the parser read it as a conditional without else.
      s->filter = std::move(s->expr->children[1]);
      s->expr = std::move(s->expr->children[0]);
    }
    if (p.TakeName("recursive")) return Error(p.line(), "recursive loops are not supported");
    JINJA_TRY(p.ExpectEnd());
    ++i_;
    s->bodies.emplace_back();
    std::string end;
    JINJA_TRY(ParseBody({"else", "endfor"}, &s->bodies[0], &end));
    JINJA_TRY(EndTag(end));
    if (end == "else") {
      s->bodies.emplace_back();
      JINJA_TRY(ParseBody({"endfor"}, &s->bodies[1], &end));
      JINJA_TRY(EndTag(end));
    }
    out->push_back(std::move(s));
    return absl::OkStatus();
  }

  absl::Status Set(ExprParser& p, Body* out) {
    const int line = c_[i_].line;
    auto name = p.Identifier();
    if (!name.ok()) return name.status();
    std::string target = *name;
    std::vector<std::string> targets;
    if (p.TakeOp(".")) {
      auto attr = p.Identifier();
      if (!attr.ok()) return attr.status();
      target += "." + *attr;
      targets.push_back(target);
    } else {
      targets.push_back(target);
      while (p.TakeOp(",")) {
        auto more = p.Identifier();
        if (!more.ok()) return more.status();
        targets.push_back(*more);
      }
    }
    if (p.AtEnd()) {  // {% set name %}...{% endset %}
      if (targets.size() != 1 || target.find('.') != std::string::npos) {
        return Error(line, "a set block assigns one plain name");
      }
      auto s = NewStmt(Stmt::Kind::kSetBlock, line);
      s->targets = targets;
      s->bodies.emplace_back();
      ++i_;
      std::string end;
      JINJA_TRY(ParseBody({"endset"}, &s->bodies[0], &end));
      JINJA_TRY(EndTag(end));
      out->push_back(std::move(s));
      return absl::OkStatus();
    }
    JINJA_TRY(p.ExpectOp("="));
    auto value = p.Expression(true);
    if (!value.ok()) return value.status();
    JINJA_TRY(p.ExpectEnd());
    auto s = NewStmt(Stmt::Kind::kSet, line);
    s->targets = targets;
    s->expr = *std::move(value);
    out->push_back(std::move(s));
    ++i_;
    return absl::OkStatus();
  }

  absl::Status Macro(ExprParser& p, Body* out) {
    auto s = NewStmt(Stmt::Kind::kMacro, c_[i_].line);
    auto name = p.Identifier();
    if (!name.ok()) return name.status();
    s->name = *name;
    JINJA_TRY(p.ExpectOp("("));
    while (!p.TakeOp(")")) {
      if (!s->params.empty()) JINJA_TRY(p.ExpectOp(","));
      auto param = p.Identifier();
      if (!param.ok()) return param.status();
      ExprPtr def;
      if (p.TakeOp("=")) {
        auto d = p.Expression();
        if (!d.ok()) return d.status();
        def = *std::move(d);
      }
      s->params.emplace_back(*param, std::move(def));
      if (p.AtEnd()) return Error(p.line(), "unterminated macro parameters");
    }
    JINJA_TRY(p.ExpectEnd());
    ++i_;
    s->bodies.emplace_back();
    std::string end;
    JINJA_TRY(ParseBody({"endmacro"}, &s->bodies[0], &end));
    JINJA_TRY(EndTag(end));
    out->push_back(std::move(s));
    return absl::OkStatus();
  }

  std::vector<Chunk> c_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

absl::StatusOr<Body> Parse(std::vector<Chunk> chunks) {
  StmtParser p(std::move(chunks));
  Body body;
  std::string end;
  JINJA_TRY(p.ParseBody({}, &body, &end));
  return body;
}

}  // namespace vismoe::jinja
