// Status propagation helpers. Abseil 20220623 (Debian 12) ships no public
// RETURN_IF_ERROR / ASSIGN_OR_RETURN, so the engine defines its own.
#ifndef VISMOE_ENGINE_CORE_STATUS_MACROS_H_
#define VISMOE_ENGINE_CORE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define VISMOE_CONCAT_INNER_(a, b) a##b
#define VISMOE_CONCAT_(a, b) VISMOE_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` yields a non-OK status.
#define VISMOE_RETURN_IF_ERROR(expr)                \
  do {                                              \
    ::absl::Status vismoe_status_ = (expr);         \
    if (!vismoe_status_.ok()) return vismoe_status_; \
  } while (0)

// `VISMOE_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from a StatusOr or
// returns its error.
#define VISMOE_ASSIGN_OR_RETURN(lhs, expr) \
  VISMOE_ASSIGN_OR_RETURN_IMPL_(VISMOE_CONCAT_(vismoe_statusor_, __LINE__), lhs, expr)
#define VISMOE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

#endif  // VISMOE_ENGINE_CORE_STATUS_MACROS_H_
