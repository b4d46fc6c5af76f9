#include "engine/model/jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace vismoe::jinja {

Str Str::Untrusted(std::string s) {
  Str out;
  out.text = std::move(s);
  if (!out.text.empty()) out.untrusted.push_back({0, out.text.size()});
  return out;
}

Str Str::Derived(std::string s, bool untrusted) {
  return untrusted ? Untrusted(std::move(s)) : Str{std::move(s), {}};
}

void Str::Append(const Str& other) {
  const size_t base = text.size();
  text += other.text;
  for (const auto& [b, e] : other.untrusted) {
    if (!untrusted.empty() && untrusted.back().second == base + b) {
      untrusted.back().second = base + e;  // adjacent ranges merge
    } else {
      untrusted.push_back({base + b, base + e});
    }
  }
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::String(Str s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::move(s);
  return v;
}
Value Value::String(std::string s) { return String(Str{std::move(s), {}}); }
Value Value::MakeList(List items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}
Value Value::MakeTuple(List items) {
  Value v = MakeList(std::move(items));
  v.tuple_ = true;
  return v;
}
Value Value::MakeDict(Dict items) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(items));
  return v;
}
Value Value::Namespace(Dict items) {
  Value v = MakeDict(std::move(items));
  v.kind_ = Kind::kNamespace;
  return v;
}
Value Value::Callable(std::string name, Function fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.name_ = std::move(name);
  v.fn_ = std::make_shared<Function>(std::move(fn));
  return v;
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0;
    case Kind::kString:
      return !s_.text.empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return !dict_->empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string FloatRepr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  const std::string sci(buf, r.ptr);  // "-d.ddde+XX"
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  std::string out;
  if (exp >= -4 && exp < 16) {  // Python: fixed notation for exponents -4 .. 15
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp) + 1) + "." +
            digits.substr(static_cast<size_t>(exp) + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char e_buf[16];
    std::snprintf(e_buf, sizeof(e_buf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += e_buf;
  }
  return neg ? "-" + out : out;
}

namespace {

std::string StringRepr(const std::string& s) {
  const bool single = s.find('\'') == std::string::npos || s.find('"') != std::string::npos;
  const char q = single ? '\'' : '"';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == q) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
  return out;
}

}  // namespace

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kString:
      return StringRepr(s_.text);
    case Kind::kList: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i > 0) out += ", ";
        out += (*list_)[i].Repr();
      }
      if (tuple_ && list_->size() == 1) out += ",";
      return out + (tuple_ ? ")" : "]");
    }
    case Kind::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < dict_->size(); ++i) {
        if (i > 0) out += ", ";
        out += StringRepr((*dict_)[i].first) + ": " + (*dict_)[i].second.Repr();
      }
      return out + "}";
    }
    default:
      return ToStr().text;
  }
}

Str Value::ToStr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return {};
    case Kind::kNone:
      return {"None", {}};
    case Kind::kBool:
      return {b_ ? "True" : "False", {}};
    case Kind::kInt:
      return {absl::StrCat(i_), {}};
    case Kind::kFloat:
      return {FloatRepr(f_), {}};
    case Kind::kString:
      return s_;
    case Kind::kNamespace:
      return {"<Namespace>", {}};
    case Kind::kCallable:
      return {absl::StrCat("<function ", name_, ">"), {}};
    case Kind::kList:
    case Kind::kDict:
      break;
  }
  // A container prints its items' repr; untrusted text inside stays marked.
  bool untrusted = false;
  std::function<void(const Value&)> scan = [&](const Value& v) {
    if (v.kind_ == Kind::kString) untrusted |= v.s_.any_untrusted();
    if (v.kind_ == Kind::kList)
      for (const Value& x : *v.list_) scan(x);
    if (v.kind_ == Kind::kDict)
      for (const auto& kv : *v.dict_) scan(kv.second);
  };
  scan(*this);
  return Str::Derived(Repr(), untrusted);
}

bool Value::Equals(const Value& o) const {
  if (is_number() && o.is_number()) {
    if (kind_ == Kind::kInt && o.kind_ == Kind::kInt) return i_ == o.i_;
    return as_number() == o.as_number();
  }
  if ((kind_ == Kind::kBool && o.is_number()) || (o.kind_ == Kind::kBool && is_number())) {
    const double a = kind_ == Kind::kBool ? (b_ ? 1 : 0) : as_number();
    const double b = o.kind_ == Kind::kBool ? (o.b_ ? 1 : 0) : o.as_number();
    return a == b;
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kBool:
      return b_ == o.b_;
    case Kind::kString:
      return s_.text == o.s_.text;
    case Kind::kList:
      if (list_->size() != o.list_->size()) return false;
      for (size_t i = 0; i < list_->size(); ++i) {
        if (!(*list_)[i].Equals((*o.list_)[i])) return false;
      }
      return true;
    case Kind::kDict:
      if (dict_->size() != o.dict_->size()) return false;
      for (const auto& [k, v] : *dict_) {
        const Value* w = o.Find(k);
        if (w == nullptr || !v.Equals(*w)) return false;
      }
      return true;
    default:
      return dict_ == o.dict_ && fn_ == o.fn_;
  }
}

Value* Value::Find(const std::string& key) const {
  if (!is_mapping()) return nullptr;
  for (auto& [k, v] : *dict_) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

namespace {

// A JSON string as Python's json.dumps(ensure_ascii=False) writes it: nlohmann
// escapes the same characters the same way (\n, \t, ..., other controls as
// \u00xx); bytes that are not UTF-8 become U+FFFD.
void JsonString(const std::string& s, std::string* out) {
  *out += nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::Status Json(const Value& v, int indent, int depth, std::string* out, bool* untrusted) {
  const auto newline = [&](int d) {
    if (indent >= 0) *out += "\n" + std::string(static_cast<size_t>(indent * d), ' ');
  };
  const char* sep = indent >= 0 ? "," : ", ";
  switch (v.kind()) {
    case Value::Kind::kNone:
      *out += "null";
      return absl::OkStatus();
    case Value::Kind::kBool:
      *out += v.as_bool() ? "true" : "false";
      return absl::OkStatus();
    case Value::Kind::kInt:
      *out += absl::StrCat(v.as_int());
      return absl::OkStatus();
    case Value::Kind::kFloat: {
      const double f = v.as_number();
      *out += std::isnan(f)   ? "NaN"
              : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity")
                              : FloatRepr(f);
      return absl::OkStatus();
    }
    case Value::Kind::kString:
      *untrusted |= v.str().any_untrusted();
      JsonString(v.str().text, out);
      return absl::OkStatus();
    case Value::Kind::kList: {
      if (v.list().empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      *out += "[";
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) *out += sep;
        newline(depth + 1);
        if (absl::Status s = Json(v.list()[i], indent, depth + 1, out, untrusted); !s.ok())
          return s;
      }
      newline(depth);
      *out += "]";
      return absl::OkStatus();
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      if (v.dict().empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      *out += "{";
      for (size_t i = 0; i < v.dict().size(); ++i) {
        if (i > 0) *out += sep;
        newline(depth + 1);
        JsonString(v.dict()[i].first, out);
        *out += ": ";
        if (absl::Status s = Json(v.dict()[i].second, indent, depth + 1, out, untrusted); !s.ok()) {
          return s;
        }
      }
      newline(depth);
      *out += "}";
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tojson: a value of type ", v.TypeName(), " is not JSON serializable"));
  }
}

}  // namespace

absl::StatusOr<Str> ToJson(const Value& v, int indent) {
  std::string out;
  bool untrusted = false;
  if (absl::Status s = Json(v, indent, 0, &out, &untrusted); !s.ok()) return s;
  return Str::Derived(std::move(out), untrusted);
}

}  // namespace vismoe::jinja
