// Values of the Jinja2 subset that chat templates use (engine/model/jinja):
// Python's None, bool, int, float, str, list and dict, Jinja's undefined,
// namespace objects and callables (macros, globals, bound methods).
//
// A string remembers which of its bytes came from untrusted data (a chat
// message's text): concatenation and output keep the marks, and any other
// operation marks its whole result when an input was marked. The renderer's
// caller tokenises marked bytes with added-token matching off, so a user
// cannot forge a turn marker by writing one.
//
// Lists, dicts and namespaces are shared by reference, as in Python.
// Thread safety: a Value is not synchronised; a template's render owns its values.
#ifndef VISMOE_ENGINE_MODEL_JINJA_VALUE_H_
#define VISMOE_ENGINE_MODEL_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace vismoe::jinja {

// Text with the byte ranges [begin, end) that came from untrusted data.
struct Str {
  std::string text;
  std::vector<std::pair<size_t, size_t>> untrusted;

  static Str Untrusted(std::string s);
  void Append(const Str& other);
  bool any_untrusted() const { return !untrusted.empty(); }
  // `s` marked wholly untrusted when any of `from` is.
  static Str Derived(std::string s, bool untrusted);
};

class Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python's

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using Function = std::function<absl::StatusOr<Value>(Args&)>;

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable
  };

  Value() = default;  // undefined
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(Str s);
  static Value String(std::string s);  // trusted
  static Value MakeList(List items = {});
  static Value MakeTuple(List items);  // a list that prints as Python's tuple
  static Value MakeDict(Dict items = {});
  static Value Namespace(Dict items = {});
  static Value Callable(std::string name, Function fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_mapping() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_number() const { return kind_ == Kind::kInt ? static_cast<double>(i_) : f_; }
  const Str& str() const { return s_; }
  List& list() const { return *list_; }
  Dict& dict() const { return *dict_; }
  const std::string& callable_name() const { return name_; }
  const Function& function() const { return *fn_; }

  // Python truthiness; undefined is false.
  bool Truthy() const;
  // Python str(): what {{ value }} prints ("" for undefined, "None", "True", 1.5, ['a']).
  Str ToStr() const;
  // Python repr(): strings quoted.
  std::string Repr() const;
  // Python ==, deep.
  bool Equals(const Value& other) const;
  // The dict entry `key`, or nullptr.
  Value* Find(const std::string& key) const;
  // Python type name, for errors.
  std::string TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool tuple_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  Str s_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::string name_;
  std::shared_ptr<Function> fn_;
};

// Python's float repr (shortest round-trip: 1.0, 0.1, 1e+16, inf, nan).
std::string FloatRepr(double f);

// json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=False) as
// transformers' tojson filter calls it; separators (", ", ": ") without an
// indent, ("," , ": ") with one. InvalidArgument for undefined or callables.
absl::StatusOr<Str> ToJson(const Value& v, int indent);

}  // namespace vismoe::jinja

#endif  // VISMOE_ENGINE_MODEL_JINJA_VALUE_H_
