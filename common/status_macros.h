// Status propagation helpers shared by every library.
//
// Abseil's own RETURN_IF_ERROR/ASSIGN_OR_RETURN are not public in the version
// Debian ships, so these are the project's. They only forward statuses; the
// codes themselves follow absl/status/status.h (see docs/architecture.md for
// which code means what to a caller).
#ifndef TRAINYARD_COMMON_STATUS_MACROS_H_
#define TRAINYARD_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainyard {

// Returns `status` with `context` prepended to its message ("context: msg"),
// keeping the code. OK stays OK.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace trainyard

#define TY_STATUS_CONCAT_INNER_(a, b) a##b
#define TY_STATUS_CONCAT_(a, b) TY_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the enclosing function
// if it is not OK.
#define TY_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status ty_status_ = (expr);      \
    if (!ty_status_.ok()) return ty_status_; \
  } while (false)

// `lhs` = value of `rexpr` (an absl::StatusOr<T>), or returns its status.
#define TY_ASSIGN_OR_RETURN(lhs, rexpr) TY_ASSIGN_OR_RETURN_IMPL_(TY_STATUS_CONCAT_(ty_statusor_, __LINE__), lhs, rexpr)

#define TY_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                              \
  if (!statusor.ok()) return statusor.status();         \
  lhs = std::move(statusor).value()

#endif  // TRAINYARD_COMMON_STATUS_MACROS_H_
