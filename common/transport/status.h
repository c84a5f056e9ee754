// transport::Status / StatusOr: the error type of common/transport, which must build without
// Abseil (see transport.h). Codes carry absl::StatusCode's numeric values, so the service code
// converts with a cast (absl_status.h). Messages say what was expected, found, and where.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace rlmesh::transport {

enum class Code : int {
  kOk = 0,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kFailedPrecondition = 9,
  kAborted = 10,
  kInternal = 13,
  kUnavailable = 14,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "DEADLINE_EXCEEDED: ..." style, for logs and tests.
  std::string ToString() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgumentError(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status DeadlineExceededError(std::string m) {
  return {Code::kDeadlineExceeded, std::move(m)};
}
inline Status FailedPreconditionError(std::string m) {
  return {Code::kFailedPrecondition, std::move(m)};
}
inline Status AbortedError(std::string m) { return {Code::kAborted, std::move(m)}; }
inline Status InternalError(std::string m) { return {Code::kInternal, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {Code::kUnavailable, std::move(m)}; }

// A value or the Status that explains its absence.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit like absl's
    if (status_.ok()) status_ = InternalError("StatusOr built from an OK status without a value");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit like absl's
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() { return *value_; }
  const T& value() const { return *value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

// Prefixes `context` to a failed status's message ("where"); OK stays OK.
inline Status Annotate(const Status& status, const std::string& context) {
  if (status.ok()) return status;
  return Status(status.code(), context + ": " + status.message());
}

}  // namespace rlmesh::transport

#define TRANSPORT_CONCAT_INNER(a, b) a##b
#define TRANSPORT_CONCAT(a, b) TRANSPORT_CONCAT_INNER(a, b)

// Returns a failed transport::Status from the enclosing function.
#define TRANSPORT_RETURN_IF_ERROR(expr)                     \
  do {                                                      \
    ::rlmesh::transport::Status transport_status_ = (expr); \
    if (!transport_status_.ok()) return transport_status_;  \
  } while (false)

// `TRANSPORT_ASSIGN_OR_RETURN(auto x, MakeX());`
#define TRANSPORT_ASSIGN_OR_RETURN(lhs, expr)                        \
  auto TRANSPORT_CONCAT(transport_statusor_, __LINE__) = (expr);     \
  if (!TRANSPORT_CONCAT(transport_statusor_, __LINE__).ok())         \
    return TRANSPORT_CONCAT(transport_statusor_, __LINE__).status(); \
  lhs = std::move(TRANSPORT_CONCAT(transport_statusor_, __LINE__).value())
