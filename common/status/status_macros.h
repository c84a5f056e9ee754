// Early-return helpers for absl::Status and absl::StatusOr, the one error idiom of rlmesh.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define RLMESH_STATUS_CONCAT_INNER(a, b) a##b
#define RLMESH_STATUS_CONCAT(a, b) RLMESH_STATUS_CONCAT_INNER(a, b)

// Returns the status from the enclosing function when `expr` is not OK.
#define RETURN_IF_ERROR(expr)                              \
  do {                                                     \
    ::absl::Status rlmesh_status_ = (expr);                \
    if (!rlmesh_status_.ok()) return rlmesh_status_;       \
  } while (false)

// `ASSIGN_OR_RETURN(auto x, MakeX());` declares or assigns `x` from an OK StatusOr, and
// returns its status from the enclosing function otherwise.
#define ASSIGN_OR_RETURN(lhs, expr) \
  RLMESH_ASSIGN_OR_RETURN_IMPL(RLMESH_STATUS_CONCAT(rlmesh_statusor_, __LINE__), lhs, expr)

#define RLMESH_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()
