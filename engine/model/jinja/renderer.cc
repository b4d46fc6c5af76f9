#include "engine/model/jinja/renderer.h"

#include <cmath>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/model/jinja/builtins.h"

namespace vismoe::jinja {
namespace {

#define JINJA_ASSIGN(lhs, expr)                 \
  auto lhs##_or = (expr);                       \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto lhs = *std::move(lhs##_or)

absl::Status Error(int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("chat template line ", line, ": ", what));
}

// Adds the template line to an error from a builtin.
absl::Status AtLine(int line, const absl::Status& s) {
  if (s.ok() || absl::StartsWith(s.message(), "chat template")) return s;
  return absl::InvalidArgumentError(absl::StrCat("chat template line ", line, ": ", s.message()));
}

using Scope = std::unordered_map<std::string, Value>;
enum class Flow { kNormal, kBreak, kContinue };

// Deep enough for every real template; a guard against runaway macro recursion.
constexpr int kMaxCallDepth = 64;
// Statements and loop iterations one render may execute, and bytes it may
// write: a chat template renders a conversation in thousands.
constexpr int64_t kMaxSteps = 1'000'000;
constexpr size_t kMaxOutputBytes = 64 << 20;

class Renderer {
 public:
  explicit Renderer(const Value& context) {
    scopes_.emplace_back();
    for (auto& [k, v] : Globals()) scopes_[0][k] = v;
    for (const auto& [k, v] : context.dict()) scopes_[0][k] = v;
  }

  absl::StatusOr<Flow> Exec(const Body& body, Str* out) {
    for (const auto& s : body) {
      JINJA_ASSIGN(flow, ExecOne(*s, out));
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

 private:
  Value Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Value();
  }

  absl::StatusOr<Flow> ExecOne(const Stmt& s, Str* out) {
    if (++steps_ > kMaxSteps || out->text.size() > kMaxOutputBytes) {
      return Error(s.line, "the template runs too long (a runaway loop?)");
    }
    switch (s.kind) {
      case Stmt::Kind::kText:
        out->Append(Str{s.text, {}});
        return Flow::kNormal;
      case Stmt::Kind::kEmit: {
        JINJA_ASSIGN(v, Eval(*s.expr));
        out->Append(v.ToStr());
        return Flow::kNormal;
      }
      case Stmt::Kind::kIf:
        for (size_t i = 0; i < s.conditions.size(); ++i) {
          JINJA_ASSIGN(c, Eval(*s.conditions[i]));
          if (c.Truthy()) return Exec(s.bodies[i], out);
        }
        if (s.bodies.size() > s.conditions.size()) return Exec(s.bodies.back(), out);
        return Flow::kNormal;
      case Stmt::Kind::kFor:
        return For(s, out);
      case Stmt::Kind::kSet: {
        JINJA_ASSIGN(v, Eval(*s.expr));
        return Assign(s, std::move(v));
      }
      case Stmt::Kind::kSetBlock: {
        Str captured;
        JINJA_ASSIGN(flow, Exec(s.bodies[0], &captured));
        (void)flow;
        scopes_.back()[s.targets[0]] = Value::String(std::move(captured));
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro:
        scopes_.back()[s.name] = MakeMacro(s);
        return Flow::kNormal;
      case Stmt::Kind::kBreak:
        if (loops_ == 0) return Error(s.line, "break outside a loop");
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        if (loops_ == 0) return Error(s.line, "continue outside a loop");
        return Flow::kContinue;
      case Stmt::Kind::kBlock:
        return Exec(s.bodies[0], out);
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> Assign(const Stmt& s, Value v) {
    const std::string& target = s.targets[0];
    const size_t dot = target.find('.');
    if (dot != std::string::npos) {
      Value ns = Lookup(target.substr(0, dot));
      if (ns.kind() != Value::Kind::kNamespace) {
        return Error(s.line, absl::StrCat("cannot assign an attribute of ", target.substr(0, dot),
                                          ", which is not a namespace"));
      }
      const std::string attr = target.substr(dot + 1);
      if (Value* slot = ns.Find(attr)) {
        *slot = std::move(v);
      } else {
        ns.dict().emplace_back(attr, std::move(v));
      }
      return Flow::kNormal;
    }
    if (s.targets.size() == 1) {
      scopes_.back()[target] = std::move(v);
      return Flow::kNormal;
    }
    auto items = Iterate(v);
    if (!items.ok()) return AtLine(s.line, items.status());
    if (items->size() != s.targets.size()) {
      return Error(
          s.line, absl::StrCat("cannot unpack ", items->size(), " values into ", s.targets.size()));
    }
    for (size_t i = 0; i < items->size(); ++i) scopes_.back()[s.targets[i]] = (*items)[i];
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> For(const Stmt& s, Str* out) {
    JINJA_ASSIGN(seq, Eval(*s.expr));
    auto all = Iterate(seq);
    if (!all.ok()) return AtLine(s.line, all.status());
    scopes_.emplace_back();
    ++loops_;
    List items;
    for (Value& item : *all) {
      if (s.filter != nullptr) {
        if (absl::Status b = BindTargets(s, item); !b.ok()) return b;
        JINJA_ASSIGN(keep, Eval(*s.filter));
        if (!keep.Truthy()) continue;
      }
      items.push_back(std::move(item));
    }
    absl::StatusOr<Flow> result = Flow::kNormal;
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n && result.ok(); ++i) {
      if (++steps_ > kMaxSteps) {
        result = Error(s.line, "the template runs too long (a runaway loop?)");
        break;
      }
      absl::Status bound = BindTargets(s, items[static_cast<size_t>(i)]);
      if (!bound.ok()) {
        result = bound;
        break;
      }
      scopes_.back()["loop"] = LoopObject(items, i);
      result = Exec(s.bodies[0], out);
      if (result.ok() && *result == Flow::kBreak) break;
    }
    --loops_;
    scopes_.pop_back();
    if (!result.ok()) return result.status();
    if (n == 0 && s.bodies.size() > 1) return Exec(s.bodies[1], out);
    return Flow::kNormal;
  }

  absl::Status BindTargets(const Stmt& s, const Value& item) {
    if (s.targets.size() == 1) {
      scopes_.back()[s.targets[0]] = item;
      return absl::OkStatus();
    }
    auto parts = Iterate(item);
    if (!parts.ok()) return AtLine(s.line, parts.status());
    if (parts->size() != s.targets.size()) {
      return Error(
          s.line, absl::StrCat("cannot unpack ", parts->size(), " values into ", s.targets.size()));
    }
    for (size_t k = 0; k < parts->size(); ++k) scopes_.back()[s.targets[k]] = (*parts)[k];
    return absl::OkStatus();
  }

  static Value LoopObject(const List& items, int64_t i) {
    const int64_t n = static_cast<int64_t>(items.size());
    Dict d = {{"index", Value::Int(i + 1)},
              {"index0", Value::Int(i)},
              {"revindex", Value::Int(n - i)},
              {"revindex0", Value::Int(n - i - 1)},
              {"first", Value::Bool(i == 0)},
              {"last", Value::Bool(i == n - 1)},
              {"length", Value::Int(n)},
              {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value()},
              {"nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value()}};
    d.emplace_back("cycle", Value::Callable("cycle", [i](Args& a) -> absl::StatusOr<Value> {
                     if (a.positional.empty())
                       return absl::InvalidArgumentError("loop.cycle() needs arguments");
                     return a.positional[static_cast<size_t>(i) % a.positional.size()];
                   }));
    return Value::MakeDict(std::move(d));
  }

  Value MakeMacro(const Stmt& s) {
    const Stmt* def = &s;
    return Value::Callable(s.name, [this, def](Args& a) -> absl::StatusOr<Value> {
      if (depth_ >= kMaxCallDepth) return Error(def->line, "macro calls nest too deep");
      Scope params;
      for (size_t i = 0; i < def->params.size(); ++i) {
        const auto& [name, fallback] = def->params[i];
        Value v;
        bool given = i < a.positional.size();
        if (given) v = a.positional[i];
        for (auto& [k, kv] : a.keyword) {
          if (k == name) {
            v = kv;
            given = true;
          }
        }
        if (!given && fallback != nullptr) {
          JINJA_ASSIGN(d, Eval(*fallback));
          v = std::move(d);
        }
        params[name] = std::move(v);
      }
      if (a.positional.size() > def->params.size()) {
        return Error(def->line, absl::StrCat("macro '", def->name, "' takes ", def->params.size(),
                                             " arguments"));
      }
      // A macro sees the template's top-level names and its parameters.
      std::vector<Scope> saved = std::move(scopes_);
      scopes_ = {saved[0], std::move(params)};
      const int loops = loops_;
      loops_ = 0;
      ++depth_;
      Str out;
      absl::StatusOr<Flow> r = Exec(def->bodies[0], &out);
      --depth_;
      loops_ = loops;
      scopes_ = std::move(saved);
      if (!r.ok()) return r.status();
      return Value::String(std::move(out));
    });
  }

  absl::StatusOr<Args> EvalArgs(const Expr& e, size_t first) {
    Args a;
    for (size_t i = first; i < e.children.size(); ++i) {
      JINJA_ASSIGN(v, Eval(*e.children[i]));
      a.positional.push_back(std::move(v));
    }
    for (const auto& [k, x] : e.keywords) {
      JINJA_ASSIGN(v, Eval(*x));
      a.keyword.emplace_back(k, std::move(v));
    }
    return a;
  }

  absl::StatusOr<Value> Eval(const Expr& e);
  absl::StatusOr<Value> Binary(const Expr& e);
  absl::StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b, int line);
  absl::StatusOr<Value> Subscript(const Value& obj, const Value& key, int line);
  absl::StatusOr<Value> Slice(const Value& obj, const Expr& e);

  std::vector<Scope> scopes_;
  int loops_ = 0;
  int depth_ = 0;
  int64_t steps_ = 0;
};

absl::StatusOr<Value> Renderer::Eval(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.value;
    case Expr::Kind::kName:
      return Lookup(e.name);
    case Expr::Kind::kAttr: {
      JINJA_ASSIGN(obj, Eval(*e.children[0]));
      if (obj.is_undefined())
        return Error(e.line, absl::StrCat("'", e.name, "' of an undefined value"));
      Value m = Method(obj, e.name);
      if (!m.is_undefined()) return m;
      if (const Value* v = obj.Find(e.name)) return *v;
      return Value();
    }
    case Expr::Kind::kItem: {
      JINJA_ASSIGN(obj, Eval(*e.children[0]));
      JINJA_ASSIGN(key, Eval(*e.children[1]));
      return Subscript(obj, key, e.line);
    }
    case Expr::Kind::kSlice: {
      JINJA_ASSIGN(obj, Eval(*e.children[0]));
      return Slice(obj, e);
    }
    case Expr::Kind::kCall: {
      JINJA_ASSIGN(fn, Eval(*e.children[0]));
      if (fn.kind() != Value::Kind::kCallable) {
        std::string what = e.children[0]->kind == Expr::Kind::kName   ? e.children[0]->name
                           : e.children[0]->kind == Expr::Kind::kAttr ? e.children[0]->name
                                                                      : "the value";
        return Error(e.line, absl::StrCat("'", what, "' is ",
                                          fn.is_undefined() ? "undefined" : "not callable"));
      }
      JINJA_ASSIGN(args, EvalArgs(e, 1));
      auto r = fn.function()(args);
      if (!r.ok()) return AtLine(e.line, r.status());
      return r;
    }
    case Expr::Kind::kFilter: {
      JINJA_ASSIGN(input, Eval(*e.children[0]));
      JINJA_ASSIGN(args, EvalArgs(e, 1));
      auto r = ApplyFilter(e.name, input, args);
      if (!r.ok()) return AtLine(e.line, r.status());
      return r;
    }
    case Expr::Kind::kTest: {
      JINJA_ASSIGN(input, Eval(*e.children[0]));
      JINJA_ASSIGN(args, EvalArgs(e, 1));
      auto r = ApplyTest(e.name, input, args);
      if (!r.ok()) return AtLine(e.line, r.status());
      return Value::Bool(*r != e.negated);
    }
    case Expr::Kind::kUnary: {
      JINJA_ASSIGN(v, Eval(*e.children[0]));
      if (e.name == "not") return Value::Bool(!v.Truthy());
      if (v.kind() == Value::Kind::kInt)
        return Value::Int(e.name == "-" ? -v.as_int() : v.as_int());
      if (v.kind() == Value::Kind::kFloat)
        return Value::Float(e.name == "-" ? -v.as_number() : v.as_number());
      return Error(e.line, absl::StrCat("bad operand type for unary ", e.name, ": ", v.TypeName()));
    }
    case Expr::Kind::kBinary:
      return Binary(e);
    case Expr::Kind::kCond: {
      JINJA_ASSIGN(c, Eval(*e.children[1]));
      if (c.Truthy()) return Eval(*e.children[0]);
      return e.children[2] != nullptr ? Eval(*e.children[2]) : absl::StatusOr<Value>(Value());
    }
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      List items;
      for (const auto& c : e.children) {
        JINJA_ASSIGN(v, Eval(*c));
        items.push_back(std::move(v));
      }
      if (e.kind == Expr::Kind::kTuple) return Value::MakeTuple(std::move(items));
      return Value::MakeList(std::move(items));
    }
    case Expr::Kind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
        JINJA_ASSIGN(k, Eval(*e.children[i]));
        if (!k.is_string()) return Error(e.line, "dict keys must be strings");
        JINJA_ASSIGN(v, Eval(*e.children[i + 1]));
        bool replaced = false;
        for (auto& [dk, dv] : d) {
          if (dk == k.str().text) {
            dv = v;
            replaced = true;
          }
        }
        if (!replaced) d.emplace_back(k.str().text, std::move(v));
      }
      return Value::MakeDict(std::move(d));
    }
  }
  return Error(e.line, "unknown expression");
}

absl::StatusOr<Value> Renderer::Binary(const Expr& e) {
  const std::string& op = e.name;
  JINJA_ASSIGN(a, Eval(*e.children[0]));
  if (op == "and") return a.Truthy() ? Eval(*e.children[1]) : absl::StatusOr<Value>(a);
  if (op == "or") return a.Truthy() ? absl::StatusOr<Value>(a) : Eval(*e.children[1]);
  JINJA_ASSIGN(b, Eval(*e.children[1]));
  if (op == "==") return Value::Bool(a.Equals(b));
  if (op == "!=") return Value::Bool(!a.Equals(b));
  if (op == "in" || op == "not in") {
    Args args;
    args.positional.push_back(b);
    auto r = ApplyTest("in", a, args);
    if (!r.ok()) return AtLine(e.line, r.status());
    return Value::Bool(*r == (op == "in"));
  }
  if (op == "<" || op == "<=" || op == ">" || op == ">=") {
    Args args;
    args.positional.push_back(b);
    auto r = ApplyTest(op, a, args);
    if (!r.ok()) return AtLine(e.line, r.status());
    return Value::Bool(*r);
  }
  if (op == "~") {
    Str s = a.ToStr();
    s.Append(b.ToStr());
    return Value::String(std::move(s));
  }
  return Arithmetic(op, a, b, e.line);
}

absl::StatusOr<Value> Renderer::Arithmetic(const std::string& op, const Value& a, const Value& b,
                                           int line) {
  auto mismatch = [&]() {
    return Error(line, absl::StrCat("unsupported operand types for ", op, ": '", a.TypeName(),
                                    "' and '", b.TypeName(), "'"));
  };
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      Str s = a.str();
      s.Append(b.str());
      return Value::String(std::move(s));
    }
    if (a.is_list() && b.is_list()) {
      List l = a.list();
      l.insert(l.end(), b.list().begin(), b.list().end());
      return Value::MakeList(std::move(l));
    }
  }
  if (op == "*" && ((a.is_string() && b.kind() == Value::Kind::kInt) ||
                    (b.is_string() && a.kind() == Value::Kind::kInt))) {
    const Value& s = a.is_string() ? a : b;
    const int64_t n = a.is_string() ? b.as_int() : a.as_int();
    if (n > 0 && static_cast<double>(n) * static_cast<double>(s.str().text.size()) > 1e7) {
      return Error(line, "string repetition too long");
    }
    Str out;
    for (int64_t i = 0; i < n; ++i) out.Append(s.str());
    return Value::String(std::move(out));
  }
  const auto numeric = [](const Value& v) {
    return v.is_number() || v.kind() == Value::Kind::kBool;
  };
  if (!numeric(a) || !numeric(b)) return mismatch();
  const auto as_int = [](const Value& v) {
    return v.kind() == Value::Kind::kBool ? (v.as_bool() ? 1 : 0) : v.as_int();
  };
  const auto as_double = [&](const Value& v) {
    return v.kind() == Value::Kind::kBool ? static_cast<double>(as_int(v)) : v.as_number();
  };
  const bool ints = a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat;
  const double x = as_double(a), y = as_double(b);
  if (op == "/") {
    if (y == 0) return Error(line, "division by zero");
    return Value::Float(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0) return Error(line, op == "%" ? "modulo by zero" : "division by zero");
    if (ints) {
      const int64_t p = as_int(a), q = as_int(b);
      int64_t d = p / q, m = p % q;
      if (m != 0 && ((m < 0) != (q < 0))) {  // Python floors
        d -= 1;
        m += q;
      }
      return Value::Int(op == "//" ? d : m);
    }
    const double d = std::floor(x / y);
    return Value::Float(op == "//" ? d : x - d * y);
  }
  if (op == "**") {
    if (ints && as_int(b) >= 0) return Value::Int(static_cast<int64_t>(std::pow(x, y)));
    return Value::Float(std::pow(x, y));
  }
  if (ints) {
    const int64_t p = as_int(a), q = as_int(b);
    if (op == "+") return Value::Int(p + q);
    if (op == "-") return Value::Int(p - q);
    if (op == "*") return Value::Int(p * q);
  } else {
    if (op == "+") return Value::Float(x + y);
    if (op == "-") return Value::Float(x - y);
    if (op == "*") return Value::Float(x * y);
  }
  return mismatch();
}

absl::StatusOr<Value> Renderer::Subscript(const Value& obj, const Value& key, int line) {
  if (obj.is_undefined())
    return Error(line, absl::StrCat("subscript ", key.Repr(), " of an undefined value"));
  if (obj.is_mapping()) {
    if (key.is_string()) {
      if (const Value* v = obj.Find(key.str().text)) return *v;
      Value m = Method(obj, key.str().text);
      return m;
    }
    return Value();
  }
  if (obj.is_list() || obj.is_string()) {
    if (key.kind() != Value::Kind::kInt) {
      if (key.is_string()) return Method(obj, key.str().text);
      return Error(line, absl::StrCat("indices must be integers, not ", key.TypeName()));
    }
    JINJA_ASSIGN(items, Iterate(obj));
    int64_t i = key.as_int();
    const int64_t n = static_cast<int64_t>(items.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value();  // Jinja: undefined
    return items[static_cast<size_t>(i)];
  }
  return Value();
}

absl::StatusOr<Value> Renderer::Slice(const Value& obj, const Expr& e) {
  if (!obj.is_list() && !obj.is_string()) {
    return Error(e.line, absl::StrCat("cannot slice a ", obj.TypeName()));
  }
  JINJA_ASSIGN(items, Iterate(obj));
  const int64_t n = static_cast<int64_t>(items.size());
  int64_t part[3] = {0, 0, 1};
  bool given[3] = {false, false, false};
  for (int k = 0; k < 3; ++k) {
    if (e.children[static_cast<size_t>(k) + 1] == nullptr) continue;
    JINJA_ASSIGN(v, Eval(*e.children[static_cast<size_t>(k) + 1]));
    if (v.is_none()) continue;
    if (v.kind() != Value::Kind::kInt) return Error(e.line, "slice indices must be integers");
    part[k] = v.as_int();
    given[k] = true;
  }
  const int64_t step = part[2];
  if (step == 0) return Error(e.line, "slice step cannot be zero");
  // Python's slice.indices().
  auto clamp = [&](int64_t v, bool is_given, int64_t fallback) {
    if (!is_given) return fallback;
    if (v < 0) v += n;
    if (step > 0) return std::min(std::max<int64_t>(v, 0), n);
    return std::min(std::max<int64_t>(v, -1), n - 1);
  };
  const int64_t start = clamp(part[0], given[0], step > 0 ? 0 : n - 1);
  const int64_t stop = clamp(part[1], given[1], step > 0 ? n : -1);
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
    out.push_back(items[static_cast<size_t>(i)]);
  if (obj.is_string()) {
    Str s;
    for (const Value& c : out) s.Append(c.str());
    return Value::String(std::move(s));
  }
  return Value::MakeList(std::move(out));
}

}  // namespace

absl::StatusOr<Str> Render(const Body& body, const Value& context) {
  Renderer r(context);
  Str out;
  auto flow = r.Exec(body, &out);
  if (!flow.ok()) return flow.status();
  return out;
}

}  // namespace vismoe::jinja
