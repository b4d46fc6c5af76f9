// The syntax tree of a parsed Jinja template (engine/model/jinja): expression
// and statement nodes, built by the parser and walked by the renderer.
// Thread safety: immutable after parsing.
#ifndef VISMOE_ENGINE_MODEL_JINJA_AST_H_
#define VISMOE_ENGINE_MODEL_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/jinja/value.h"

namespace vismoe::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // value
    kName,     // name
    kAttr,     // a.name
    kItem,     // a[b]
    kSlice,    // a[b:c:d]; absent parts are null
    kCall,     // a(args, kw=...)
    kFilter,   // a | name(args)
    kTest,     // a is [not] name(args)
    kUnary,    // op a: "not", "-", "+"
    kBinary,   // a op b: or and + - * / // % ** ~ == != < <= > >= in "not in"
    kCond,     // a if b else c (c may be null)
    kList,     // [a, b]
    kTuple,    // (a, b)
    kDict,     // {k: v}
  };
  Kind kind;
  int line = 0;
  Value value;       // literal
  std::string name;  // name, attribute, filter, test, operator
  bool negated = false;
  std::vector<ExprPtr> children;  // operands, items, dict keys and values alternating, slice parts
  std::vector<std::pair<std::string, ExprPtr>> keywords;  // calls, filters
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,      // text
    kEmit,      // {{ expr }}
    kIf,        // conditions[i] -> bodies[i]; bodies.back() is the else when longer
    kFor,       // targets in expr [if filter]: bodies[0], else bodies[1]
    kSet,       // targets (one name, or a namespace attribute "ns.attr") = expr
    kSetBlock,  // {% set name %}bodies[0]{% endset %}
    kMacro,     // {% macro name(params) %}
    kBreak,
    kContinue,
    kBlock,  // a body rendered in place ({% generation %})
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  std::vector<std::string> targets;
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters and defaults
};

}  // namespace vismoe::jinja

#endif  // VISMOE_ENGINE_MODEL_JINJA_AST_H_
