// The filters, tests, methods and global functions the renderer provides
// (engine/model/jinja/renderer.h), with Python's semantics on UTF-8 strings.
// Thread safety: pure functions.
#ifndef VISMOE_ENGINE_MODEL_JINJA_BUILTINS_H_
#define VISMOE_ENGINE_MODEL_JINJA_BUILTINS_H_

#include <string>

#include "absl/status/statusor.h"
#include "engine/model/jinja/value.h"

namespace vismoe::jinja {

// `input | name(args)`. REQUIRES: IsKnownFilter(name).
absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& input, Args& args);
// `v is name(args)`. REQUIRES: IsKnownTest(name).
absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& v, Args& args);
// The bound method `obj.name` of a str, dict or list; undefined when none.
Value Method(const Value& obj, const std::string& name);
// The global functions (range, namespace, dict, raise_exception, strftime_now).
Dict Globals();

// Python iteration: a list's items, a dict's keys, a string's characters;
// undefined gives nothing.
absl::StatusOr<List> Iterate(const Value& v);
// Python len().
absl::StatusOr<int64_t> Length(const Value& v);

}  // namespace vismoe::jinja

#endif  // VISMOE_ENGINE_MODEL_JINJA_BUILTINS_H_
