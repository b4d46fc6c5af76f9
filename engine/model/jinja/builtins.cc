#include "engine/model/jinja/builtins.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/model/jinja/parser.h"
#include "engine/model/utf8.h"

namespace vismoe::jinja {
namespace {

absl::Status Error(absl::string_view what) { return absl::InvalidArgumentError(std::string(what)); }

// The UTF-8 characters of s (an invalid byte run is one "character").
std::vector<std::string> Chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8::ScanUnit(s, i).length;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

bool IsPySpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// The argument `name` at `pos` or keyword, or `fallback`.
Value Arg(Args& a, size_t pos, const char* name, Value fallback = Value()) {
  if (pos < a.positional.size()) return a.positional[pos];
  for (auto& [k, v] : a.keyword) {
    if (k == name) return v;
  }
  return fallback;
}

absl::StatusOr<std::string> StrArg(Args& a, size_t pos, const char* name, const char* fn) {
  Value v = Arg(a, pos, name);
  if (!v.is_string()) {
    return Error(absl::StrCat(fn, "() argument '", name, "' must be str, not ", v.TypeName()));
  }
  return v.str().text;
}

Value Derived(const Value& from, std::string s) {
  return Value::String(Str::Derived(std::move(s), from.str().any_untrusted()));
}

std::string Strip(const std::string& s, const Value& chars, bool left, bool right) {
  auto strip_char = [&](char c) {
    return chars.is_string() ? chars.str().text.find(c) != std::string::npos : IsPySpace(c);
  };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e && strip_char(s[b])) ++b;
  }
  if (right) {
    while (e > b && strip_char(s[e - 1])) --e;
  }
  return s.substr(b, e - b);
}

// str.split / str.rsplit.
absl::StatusOr<List> Split(const Value& self, Args& a, bool from_right) {
  const std::string& s = self.str().text;
  const Value sep = Arg(a, 0, "sep", Value::None());
  const Value max = Arg(a, 1, "maxsplit", Value::Int(-1));
  if (!max.is_number()) return Error("split() maxsplit must be an int");
  int64_t left = max.as_int();
  std::vector<std::string> parts;
  if (sep.is_none()) {  // runs of whitespace; no empty strings
    std::vector<std::pair<size_t, size_t>> words;
    for (size_t i = 0; i < s.size();) {
      while (i < s.size() && IsPySpace(s[i])) ++i;
      size_t j = i;
      while (j < s.size() && !IsPySpace(s[j])) ++j;
      if (j > i) words.push_back({i, j});
      i = j;
    }
    if (left < 0 || static_cast<size_t>(left) >= words.size()) {
      for (auto [b, e] : words) parts.push_back(s.substr(b, e - b));
    } else if (!from_right) {
      for (int64_t k = 0; k < left; ++k)
        parts.push_back(s.substr(words[k].first, words[k].second - words[k].first));
      parts.push_back(Strip(s.substr(words[left].first), Value(), false, true));
    } else {
      const size_t first = words.size() - static_cast<size_t>(left);
      parts.push_back(Strip(s.substr(0, words[first - 1].second), Value(), true, false));
      for (size_t k = first; k < words.size(); ++k)
        parts.push_back(s.substr(words[k].first, words[k].second - words[k].first));
    }
  } else {
    if (!sep.is_string() || sep.str().text.empty())
      return Error("split() separator must be a non-empty str");
    const std::string& d = sep.str().text;
    if (!from_right) {
      size_t start = 0;
      while (left != 0) {
        const size_t at = s.find(d, start);
        if (at == std::string::npos) break;
        parts.push_back(s.substr(start, at - start));
        start = at + d.size();
        --left;
      }
      parts.push_back(s.substr(start));
    } else {
      size_t end = s.size();
      std::vector<std::string> rev;
      while (left != 0 && end >= d.size()) {
        const size_t at = s.rfind(d, end - d.size());
        if (at == std::string::npos) break;
        rev.push_back(s.substr(at + d.size(), end - at - d.size()));
        end = at;
        --left;
      }
      rev.push_back(s.substr(0, end));
      parts.assign(rev.rbegin(), rev.rend());
    }
  }
  List out;
  for (std::string& p : parts) out.push_back(Derived(self, std::move(p)));
  return out;
}

absl::StatusOr<bool> AffixTest(const Value& self, Args& a, bool prefix) {
  const Value v = Arg(a, 0, "prefix");
  std::vector<std::string> options;
  if (v.is_string()) {
    options.push_back(v.str().text);
  } else if (v.is_list()) {
    for (const Value& x : v.list()) {
      if (!x.is_string()) return Error("startswith/endswith take str or a tuple of str");
      options.push_back(x.str().text);
    }
  } else {
    return Error("startswith/endswith take str or a tuple of str");
  }
  const std::string& s = self.str().text;
  for (const std::string& o : options) {
    if (prefix ? s.starts_with(o) : s.ends_with(o)) return true;
  }
  return false;
}

std::string Capitalize(const std::string& s) {
  std::string out = absl::AsciiStrToLower(s);
  if (!out.empty()) out[0] = absl::ascii_toupper(out[0]);
  return out;
}

std::string Title(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    if (absl::ascii_isalpha(c)) {
      c = start ? absl::ascii_toupper(c) : absl::ascii_tolower(c);
      start = false;
    } else {
      start = true;
    }
  }
  return out;
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  if (from.empty()) return s;  // Python inserts between characters; no template does
  std::string out;
  size_t pos = 0;
  while (count != 0) {
    const size_t at = s.find(from, pos);
    if (at == std::string::npos) break;
    out += s.substr(pos, at - pos) + to;
    pos = at + from.size();
    --count;
  }
  return out + s.substr(pos);
}

Value Bound(const Value& self, std::string name,
            std::function<absl::StatusOr<Value>(const Value&, Args&)> fn) {
  return Value::Callable(name, [self, fn](Args& a) { return fn(self, a); });
}

Value StringMethod(const Value& self, const std::string& name) {
  auto transform = [&](std::function<std::string(const std::string&, Args&)> f) {
    return Bound(self, name, [f](const Value& s, Args& a) -> absl::StatusOr<Value> {
      return Derived(s, f(s.str().text, a));
    });
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool l = name != "rstrip", r = name != "lstrip";
    return transform([l, r](const std::string& s, Args& a) {
      return Strip(s, Arg(a, 0, "chars", Value::None()), l, r);
    });
  }
  if (name == "upper")
    return transform([](const std::string& s, Args&) { return absl::AsciiStrToUpper(s); });
  if (name == "lower")
    return transform([](const std::string& s, Args&) { return absl::AsciiStrToLower(s); });
  if (name == "title") return transform([](const std::string& s, Args&) { return Title(s); });
  if (name == "capitalize")
    return transform([](const std::string& s, Args&) { return Capitalize(s); });
  if (name == "split" || name == "rsplit") {
    const bool right = name == "rsplit";
    return Bound(self, name, [right](const Value& s, Args& a) -> absl::StatusOr<Value> {
      auto parts = Split(s, a, right);
      if (!parts.ok()) return parts.status();
      return Value::MakeList(*std::move(parts));
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool prefix = name == "startswith";
    return Bound(self, name, [prefix](const Value& s, Args& a) -> absl::StatusOr<Value> {
      auto r = AffixTest(s, a, prefix);
      if (!r.ok()) return r.status();
      return Value::Bool(*r);
    });
  }
  if (name == "replace") {
    return Bound(self, name, [](const Value& s, Args& a) -> absl::StatusOr<Value> {
      auto from = StrArg(a, 0, "old", "replace");
      auto to = StrArg(a, 1, "new", "replace");
      if (!from.ok()) return from.status();
      if (!to.ok()) return to.status();
      const Value count = Arg(a, 2, "count", Value::Int(-1));
      const bool untrusted = s.str().any_untrusted() ||
                             (a.positional.size() > 1 && a.positional[1].str().any_untrusted());
      return Value::String(
          Str::Derived(Replace(s.str().text, *from, *to, count.as_int()), untrusted));
    });
  }
  if (name == "find" || name == "rfind" || name == "count") {
    return Bound(self, name, [name](const Value& s, Args& a) -> absl::StatusOr<Value> {
      auto sub = StrArg(a, 0, "sub", name.c_str());
      if (!sub.ok()) return sub.status();
      const std::string& t = s.str().text;
      if (name == "count") {
        int64_t n = 0;
        for (size_t at = t.find(*sub); !sub->empty() && at != std::string::npos;
             at = t.find(*sub, at + sub->size()))
          ++n;
        return Value::Int(n);
      }
      const size_t at = name == "find" ? t.find(*sub) : t.rfind(*sub);
      // Byte offsets equal Python's character offsets on ASCII text only.
      return Value::Int(
          at == std::string::npos ? -1 : static_cast<int64_t>(Chars(t.substr(0, at)).size()));
    });
  }
  if (name == "join") {
    return Bound(self, name, [](const Value& s, Args& a) -> absl::StatusOr<Value> {
      auto items = Iterate(Arg(a, 0, "iterable"));
      if (!items.ok()) return items.status();
      Str out;
      for (size_t i = 0; i < items->size(); ++i) {
        if (i > 0) out.Append(s.str());
        if (!(*items)[i].is_string()) return Error("join() takes strings");
        out.Append((*items)[i].str());
      }
      return Value::String(std::move(out));
    });
  }
  return Value();
}

Value DictMethod(const Value& self, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Bound(self, name, [name](const Value& d, Args&) -> absl::StatusOr<Value> {
      List out;
      for (const auto& [k, v] : d.dict()) {
        if (name == "items") {
          out.push_back(Value::MakeTuple({Value::String(k), v}));
        } else {
          out.push_back(name == "keys" ? Value::String(k) : v);
        }
      }
      return Value::MakeList(std::move(out));
    });
  }
  if (name == "get") {
    return Bound(self, name, [](const Value& d, Args& a) -> absl::StatusOr<Value> {
      const Value key = Arg(a, 0, "key");
      const Value* v = key.is_string() ? d.Find(key.str().text) : nullptr;
      return v != nullptr ? *v : Arg(a, 1, "default", Value::None());
    });
  }
  return Value();
}

// Sort key order for min / max / sort / dictsort: numbers, then strings.
absl::StatusOr<bool> Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_number() < b.as_number();
  if (a.is_string() && b.is_string()) return a.str().text < b.str().text;
  return Error(absl::StrCat("'<' not supported between ", a.TypeName(), " and ", b.TypeName()));
}

absl::StatusOr<Value> Attribute(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string key = path.substr(start, dot - start);
    const Value* next = cur.Find(key);
    cur = next != nullptr ? *next : Value();
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// select / reject / selectattr / rejectattr.
absl::StatusOr<Value> Select(const std::string& name, const Value& input, Args& a) {
  const bool attr = name.ends_with("attr");
  const bool keep = name.starts_with("select");
  auto items = Iterate(input);
  if (!items.ok()) return items.status();
  size_t next = 0;
  std::string attribute;
  if (attr) {
    auto s = StrArg(a, next++, "attribute", name.c_str());
    if (!s.ok()) return s.status();
    attribute = *s;
  }
  std::string test;
  if (next < a.positional.size()) {
    if (!a.positional[next].is_string())
      return Error(absl::StrCat(name, "(): the test name must be a str"));
    test = a.positional[next++].str().text;
    if (!IsKnownTest(test)) return Error(absl::StrCat(name, "(): unsupported test '", test, "'"));
  }
  Args test_args;
  test_args.positional.assign(
      a.positional.begin() + static_cast<std::ptrdiff_t>(std::min(next, a.positional.size())),
      a.positional.end());
  List out;
  for (const Value& item : *items) {
    Value subject = item;
    if (attr) {
      auto s = Attribute(item, attribute);
      if (!s.ok()) return s.status();
      subject = *s;
    }
    bool pass = subject.Truthy();
    if (!test.empty()) {
      auto r = ApplyTest(test, subject, test_args);
      if (!r.ok()) return r.status();
      pass = *r;
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}

absl::StatusOr<Value> MinMax(const Value& input, bool max) {
  auto items = Iterate(input);
  if (!items.ok()) return items.status();
  if (items->empty()) return Value();
  Value best = (*items)[0];
  for (const Value& v : *items) {
    auto less = max ? Less(best, v) : Less(v, best);
    if (!less.ok()) return less.status();
    if (*less) best = v;
  }
  return best;
}

absl::StatusOr<Value> ToInt(const Value& v, const Value& fallback) {
  if (v.kind() == Value::Kind::kInt) return v;
  if (v.kind() == Value::Kind::kFloat) return Value::Int(static_cast<int64_t>(v.as_number()));
  if (v.kind() == Value::Kind::kBool) return Value::Int(v.as_bool() ? 1 : 0);
  if (v.is_string()) {
    try {
      size_t used = 0;
      const std::string t = Strip(v.str().text, Value(), true, true);
      const double d = std::stod(t, &used);
      if (used == t.size()) return Value::Int(static_cast<int64_t>(d));
    } catch (...) {
    }
  }
  return fallback;
}

}  // namespace

absl::StatusOr<List> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return List{};
    case Value::Kind::kList:
      return v.list();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& kv : v.dict()) keys.push_back(Value::String(kv.first));
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (std::string& c : Chars(v.str().text)) chars.push_back(Derived(v, std::move(c)));
      return chars;
    }
    default:
      return Error(absl::StrCat("'", v.TypeName(), "' object is not iterable"));
  }
}

absl::StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(Chars(v.str().text).size());
    case Value::Kind::kList:
      return static_cast<int64_t>(v.list().size());
    case Value::Kind::kDict:
    case Value::Kind::kNamespace:
      return static_cast<int64_t>(v.dict().size());
    default:
      return Error(absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
  }
}

Value Method(const Value& obj, const std::string& name) {
  if (obj.is_string()) return StringMethod(obj, name);
  if (obj.kind() == Value::Kind::kDict) return DictMethod(obj, name);
  return Value();
}

bool IsKnownFilter(const std::string& n) {
  static const std::set<std::string> kFilters = {
      "abs",    "capitalize", "count",  "d",          "default", "dictsort", "first",  "float",
      "int",    "items",      "join",   "last",       "length",  "list",     "lower",  "map",
      "max",    "min",        "reject", "rejectattr", "replace", "reverse",  "round",  "safe",
      "select", "selectattr", "sort",   "string",     "sum",     "title",    "tojson", "trim",
      "unique", "upper",      "indent", "wordcount"};
  return kFilters.count(n) > 0;
}

bool IsKnownTest(const std::string& n) {
  static const std::set<std::string> kTests = {
      "defined", "undefined",   "none",     "string",  "number", "integer", "float",
      "mapping", "iterable",    "sequence", "boolean", "true",   "false",   "even",
      "odd",     "divisibleby", "eq",       "equalto", "==",     "ne",      "!=",
      "lt",      "<",           "le",       "<=",      "gt",     ">",       "ge",
      ">=",      "in",          "callable", "lower",   "upper",  "sameas"};
  return kTests.count(n) > 0;
}

absl::StatusOr<bool> ApplyTest(const std::string& n, const Value& v, Args& a) {
  using K = Value::Kind;
  const Value other = Arg(a, 0, "other");
  if (n == "defined") return !v.is_undefined();
  if (n == "undefined") return v.is_undefined();
  if (n == "none") return v.is_none();
  if (n == "string") return v.is_string();
  if (n == "number") return v.is_number();
  if (n == "integer") return v.kind() == K::kInt;
  if (n == "float") return v.kind() == K::kFloat;
  if (n == "mapping") return v.kind() == K::kDict;
  if (n == "iterable") return v.is_list() || v.is_string() || v.kind() == K::kDict;
  if (n == "sequence") return v.is_list() || v.is_string() || v.kind() == K::kDict;
  if (n == "boolean") return v.kind() == K::kBool;
  if (n == "true") return v.kind() == K::kBool && v.as_bool();
  if (n == "false") return v.kind() == K::kBool && !v.as_bool();
  if (n == "callable") return v.kind() == K::kCallable;
  if (n == "lower") return v.is_string() && absl::AsciiStrToLower(v.str().text) == v.str().text;
  if (n == "upper") return v.is_string() && absl::AsciiStrToUpper(v.str().text) == v.str().text;
  if (n == "even" || n == "odd" || n == "divisibleby") {
    if (v.kind() != K::kInt) return Error(absl::StrCat("test '", n, "' needs an int"));
    const int64_t d = n == "divisibleby" ? other.as_int() : 2;
    if (d == 0) return Error("divisibleby 0");
    const bool divisible = v.as_int() % d == 0;
    return n == "odd" ? !divisible : divisible;
  }
  if (n == "eq" || n == "equalto" || n == "==" || n == "sameas") return v.Equals(other);
  if (n == "ne" || n == "!=") return !v.Equals(other);
  if (n == "in") {
    if (other.is_string() && v.is_string())
      return other.str().text.find(v.str().text) != std::string::npos;
    if (other.is_mapping()) return v.is_string() && other.Find(v.str().text) != nullptr;
    auto items = Iterate(other);
    if (!items.ok()) return items.status();
    for (const Value& x : *items) {
      if (x.Equals(v)) return true;
    }
    return false;
  }
  // Orderings.
  auto less = Less(v, other);
  auto greater = Less(other, v);
  if (!less.ok()) return less.status();
  if (!greater.ok()) return greater.status();
  if (n == "lt" || n == "<") return *less;
  if (n == "gt" || n == ">") return *greater;
  if (n == "le" || n == "<=") return !*greater;
  return !*less;  // ge
}

absl::StatusOr<Value> ApplyFilter(const std::string& n, const Value& v, Args& a) {
  if (n == "default" || n == "d") {
    const bool boolean = Arg(a, 1, "boolean", Value::Bool(false)).Truthy();
    const bool use_default = boolean ? !v.Truthy() : v.is_undefined();
    return use_default ? Arg(a, 0, "default_value", Value::String("")) : v;
  }
  if (n == "length" || n == "count") {
    auto len = Length(v);
    if (!len.ok()) return len.status();
    return Value::Int(*len);
  }
  if (n == "tojson") {
    const Value indent = Arg(a, 0, "indent", Value::None());
    auto json = ToJson(v, indent.is_number() ? static_cast<int>(indent.as_int()) : -1);
    if (!json.ok()) return json.status();
    return Value::String(*std::move(json));
  }
  if (n == "string") return Value::String(v.ToStr());
  if (n == "safe") return v;
  if (n == "trim") {
    if (!v.is_string()) return Error("trim needs a str");
    return Derived(v, Strip(v.str().text, Arg(a, 0, "chars", Value::None()), true, true));
  }
  if (n == "upper" || n == "lower" || n == "title" || n == "capitalize") {
    const Str s = v.ToStr();
    const Value sv = Value::String(s);
    const std::string t = n == "upper"   ? absl::AsciiStrToUpper(s.text)
                          : n == "lower" ? absl::AsciiStrToLower(s.text)
                          : n == "title" ? Title(s.text)
                                         : Capitalize(s.text);
    return Derived(sv, t);
  }
  if (n == "replace") {
    const Value sv = Value::String(v.ToStr());
    auto from = StrArg(a, 0, "old", "replace");
    auto to = StrArg(a, 1, "new", "replace");
    if (!from.ok()) return from.status();
    if (!to.ok()) return to.status();
    return Derived(sv,
                   Replace(sv.str().text, *from, *to, Arg(a, 2, "count", Value::Int(-1)).as_int()));
  }
  if (n == "indent") {
    const Value sv = Value::String(v.ToStr());
    const Value width = Arg(a, 0, "width", Value::Int(4));
    const bool first = Arg(a, 1, "first", Value::Bool(false)).Truthy();
    const bool blank = Arg(a, 2, "blank", Value::Bool(false)).Truthy();
    const std::string pad = width.is_string()
                                ? width.str().text
                                : std::string(static_cast<size_t>(width.as_int()), ' ');
    std::string out;
    const std::string& s = sv.str().text;
    size_t start = 0;
    bool first_line = true;
    while (start <= s.size()) {
      size_t nl = s.find('\n', start);
      const std::string line =
          s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
      if ((!first_line || first) && (blank || !Strip(line, Value(), true, true).empty()))
        out += pad;
      out += line;
      if (nl == std::string::npos) break;
      out += '\n';
      start = nl + 1;
      first_line = false;
    }
    return Derived(sv, out);
  }
  if (n == "wordcount") {
    auto words = Split(Value::String(v.ToStr()), a, false);
    if (!words.ok()) return words.status();
    return Value::Int(static_cast<int64_t>(words->size()));
  }
  if (n == "int") return ToInt(v, Arg(a, 0, "default", Value::Int(0)));
  if (n == "float") {
    if (v.is_number()) return Value::Float(v.as_number());
    if (v.is_string()) {
      try {
        return Value::Float(std::stod(v.str().text));
      } catch (...) {
      }
    }
    return Arg(a, 0, "default", Value::Float(0));
  }
  if (n == "abs") {
    if (v.kind() == Value::Kind::kInt) return Value::Int(v.as_int() < 0 ? -v.as_int() : v.as_int());
    if (v.is_number()) return Value::Float(std::fabs(v.as_number()));
    return Error(absl::StrCat("bad operand type for abs(): ", v.TypeName()));
  }
  if (n == "round") {
    if (!v.is_number()) return Error("round needs a number");
    const int64_t digits = Arg(a, 0, "precision", Value::Int(0)).as_int();
    const double scale = std::pow(10.0, static_cast<double>(digits));
    return Value::Float(std::nearbyint(v.as_number() * scale) / scale);
  }
  if (n == "items") {
    if (v.is_undefined()) return Value::MakeList();
    if (!v.is_mapping()) return Error("items needs a mapping");
    return DictMethod(v, "items").function()(a);
  }
  if (n == "dictsort") {
    if (!v.is_mapping()) return Error("dictsort needs a mapping");
    Dict d = v.dict();
    std::stable_sort(d.begin(), d.end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    List out;
    for (auto& [k, val] : d) out.push_back(Value::MakeTuple({Value::String(k), val}));
    return Value::MakeList(std::move(out));
  }
  auto items = Iterate(v);
  if (!items.ok()) return items.status();
  if (n == "list") return Value::MakeList(*items);
  if (n == "first") return items->empty() ? Value() : items->front();
  if (n == "last") return items->empty() ? Value() : items->back();
  if (n == "reverse") {
    std::reverse(items->begin(), items->end());
    if (v.is_string()) {
      Str s;
      for (const Value& c : *items) s.Append(c.str());
      return Value::String(std::move(s));
    }
    return Value::MakeList(*std::move(items));
  }
  if (n == "join") {
    const Value sep = Arg(a, 0, "d", Value::String(""));
    const Value attr = Arg(a, 1, "attribute", Value::None());
    Str out;
    for (size_t i = 0; i < items->size(); ++i) {
      if (i > 0) out.Append(sep.ToStr());
      Value item = (*items)[i];
      if (attr.is_string()) {
        auto x = Attribute(item, attr.str().text);
        if (!x.ok()) return x.status();
        item = *x;
      }
      out.Append(item.ToStr());
    }
    return Value::String(std::move(out));
  }
  if (n == "map") {
    const Value attr = Arg(a, 99, "attribute");
    List out;
    if (attr.is_string()) {
      const Value fallback = Arg(a, 99, "default");
      for (const Value& item : *items) {
        auto x = Attribute(item, attr.str().text);
        if (!x.ok()) return x.status();
        out.push_back(x->is_undefined() ? fallback : *x);
      }
      return Value::MakeList(std::move(out));
    }
    if (a.positional.empty() || !a.positional[0].is_string())
      return Error("map needs a filter name or attribute=");
    const std::string filter = a.positional[0].str().text;
    if (!IsKnownFilter(filter) || filter == "map")
      return Error(absl::StrCat("map(): unsupported filter '", filter, "'"));
    Args rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.keyword = a.keyword;
    for (const Value& item : *items) {
      auto x = ApplyFilter(filter, item, rest);
      if (!x.ok()) return x.status();
      out.push_back(*std::move(x));
    }
    return Value::MakeList(std::move(out));
  }
  if (n == "select" || n == "reject" || n == "selectattr" || n == "rejectattr")
    return Select(n, v, a);
  if (n == "min" || n == "max") return MinMax(v, n == "max");
  if (n == "unique") {
    List out;
    for (const Value& x : *items) {
      bool seen = false;
      for (const Value& y : out) seen |= y.Equals(x);
      if (!seen) out.push_back(x);
    }
    return Value::MakeList(std::move(out));
  }
  if (n == "sum") {
    Value total = Arg(a, 1, "start", Value::Int(0));
    for (const Value& x : *items) {
      if (!x.is_number() || !total.is_number()) return Error("sum needs numbers");
      total = x.kind() == Value::Kind::kInt && total.kind() == Value::Kind::kInt
                  ? Value::Int(total.as_int() + x.as_int())
                  : Value::Float(total.as_number() + x.as_number());
    }
    return total;
  }
  if (n == "sort") {
    const bool reverse = Arg(a, 0, "reverse", Value::Bool(false)).Truthy();
    const Value attr = Arg(a, 2, "attribute", Value::None());
    absl::Status error;
    List sorted = *items;
    std::stable_sort(sorted.begin(), sorted.end(), [&](const Value& x, const Value& y) {
      Value kx = x, ky = y;
      if (attr.is_string()) {
        kx = *Attribute(x, attr.str().text);
        ky = *Attribute(y, attr.str().text);
      }
      auto r = reverse ? Less(ky, kx) : Less(kx, ky);
      if (!r.ok()) error = r.status();
      return r.ok() && *r;
    });
    if (!error.ok()) return error;
    return Value::MakeList(std::move(sorted));
  }
  return Error(absl::StrCat("filter '", n, "' is not implemented"));
}

Dict Globals() {
  Dict g;
  g.emplace_back("range", Value::Callable("range", [](Args& a) -> absl::StatusOr<Value> {
                   int64_t start = 0, stop = 0, step = 1;
                   for (const Value& v : a.positional) {
                     if (v.kind() != Value::Kind::kInt) return Error("range() takes ints");
                   }
                   if (a.positional.size() == 1) {
                     stop = a.positional[0].as_int();
                   } else if (a.positional.size() >= 2) {
                     start = a.positional[0].as_int();
                     stop = a.positional[1].as_int();
                     if (a.positional.size() > 2) step = a.positional[2].as_int();
                   } else {
                     return Error("range() takes 1 to 3 arguments");
                   }
                   if (step == 0) return Error("range() step must not be zero");
                   List out;
                   for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                     if (out.size() >= 1000000) return Error("range() too long");
                     out.push_back(Value::Int(i));
                   }
                   return Value::MakeList(std::move(out));
                 }));
  auto make_dict = [](bool ns) {
    return [ns](Args& a) -> absl::StatusOr<Value> {
      Dict d;
      for (const Value& v : a.positional) {
        if (!v.is_mapping()) return Error("namespace() / dict() take a mapping or keywords");
        d.insert(d.end(), v.dict().begin(), v.dict().end());
      }
      for (auto& kv : a.keyword) d.push_back(kv);
      return ns ? Value::Namespace(std::move(d)) : Value::MakeDict(std::move(d));
    };
  };
  g.emplace_back("namespace", Value::Callable("namespace", make_dict(true)));
  g.emplace_back("dict", Value::Callable("dict", make_dict(false)));
  g.emplace_back(
      "raise_exception", Value::Callable("raise_exception", [](Args& a) -> absl::StatusOr<Value> {
        const Value msg = Arg(a, 0, "message", Value::String(""));
        return absl::InvalidArgumentError(
            absl::StrCat("the chat template refused the conversation: ", msg.ToStr().text));
      }));
  g.emplace_back("strftime_now",
                 Value::Callable("strftime_now", [](Args& a) -> absl::StatusOr<Value> {
                   auto fmt = StrArg(a, 0, "format", "strftime_now");
                   if (!fmt.ok()) return fmt.status();
                   const std::time_t now =
                       std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
                   std::tm tm{};
                   localtime_r(&now, &tm);
                   char buf[256];
                   const size_t n = std::strftime(buf, sizeof(buf), fmt->c_str(), &tm);
                   return Value::String(std::string(buf, n));
                 }));
  return g;
}

}  // namespace vismoe::jinja
