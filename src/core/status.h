// Status and Result<T>: how motley reports expected failures (bad input, I/O, infeasible plan,
// communication timeout) without exceptions. Result<T> is a small subset of C++23 std::expected
// (g++ 12 lacks it), so it can be swapped for std::expected later.
//
// Contract: a Status is either ok() or carries a non-empty message that names the file, the field
// and the reason ("run.yaml: train.steps: must be positive, got -3"), and a StatusCode that says
// what kind of failure it is, so callers and scripts can tell a user error from a resource limit
// or a bug (the CLI maps codes to exit codes with ExitCodeFor). `Err(...)` without a code gives
// StatusCode::kUnknown; `Err(StatusCode::kNotFound, ...)` names one. Value types;
// thread-compatible.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <fmt/core.h>

#include "core/check.h"

namespace motley {

// What kind of failure an error Status is (after absl::StatusCode, a subset). kOk only for ok().
enum class StatusCode {
  kOk = 0,
  kUnknown,             // not yet classified (the default of Err without a code)
  kInvalidArgument,     // bad input: a file, a field, a command-line value
  kNotFound,            // a named file, checkpoint, preset or device does not exist
  kResourceExhausted,   // memory (host or device), disk, threads: a limit of the machine
  kFailedPrecondition,  // the input is valid but the state does not allow it (e.g. an infeasible
                        // plan)
  kUnavailable,         // a peer or a service is gone or silent (communication deadline, lost rank)
  kInternal,            // a broken invariant reported instead of aborting
};

// "invalid argument", ... (for messages and tests).
inline const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kUnknown: return "unknown";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kResourceExhausted: return "resource exhausted";
    case StatusCode::kFailedPrecondition: return "failed precondition";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  static Status Ok() { return Status(); }
  static Status Error(std::string message) {
    return Error(StatusCode::kUnknown, std::move(message));
  }
  static Status Error(StatusCode code, std::string message) {
    MOTLEY_CHECK(!message.empty(), "an error Status needs a message");
    MOTLEY_CHECK(code != StatusCode::kOk, "an error Status needs a code other than kOk");
    Status s;
    s.message_ = std::move(message);
    s.code_ = code;
    return s;
  }
  bool ok() const { return !message_.has_value(); }
  StatusCode code() const { return code_; }
  // The error message; empty for ok.
  const std::string& message() const {
    static const std::string kEmpty;
    return message_ ? *message_ : kEmpty;
  }
  // Returns a Status whose message is "prefix: message" (for adding context at each level).
  Status WithContext(const std::string& prefix) const {
    if (ok()) return *this;
    return Error(code_, prefix + ": " + *message_);
  }
  // The same message under another code (for a caller that knows better what the failure means).
  Status WithCode(StatusCode code) const {
    if (ok()) return *this;
    return Error(code, *message_);
  }

 private:
  std::optional<std::string> message_;
  StatusCode code_ = StatusCode::kOk;
};

// Formats an error Status: Err("{}: unknown key '{}'", path, key).
template <typename... Args>
Status Err(fmt::format_string<Args...> format, Args&&... args) {
  return Status::Error(fmt::format(format, std::forward<Args>(args)...));
}
// The same with a code: Err(StatusCode::kNotFound, "{}: no such file", path).
template <typename... Args>
Status Err(StatusCode code, fmt::format_string<Args...> format, Args&&... args) {
  return Status::Error(code, fmt::format(format, std::forward<Args>(args)...));
}

// The process exit code of a command that failed with `status` (docs/exit-codes.md): 2 for input
// and usage errors (invalid argument, not found), 1 for everything else (including kUnknown);
// 0 for ok.
inline int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk: return 0;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound: return 2;
    default: return 1;
  }
}

// An error from a parser or validator of user input: kUnknown becomes kInvalidArgument, other
// codes (kNotFound for a missing file, ...) are kept. Call sites of spec parsing and plan
// validation wrap their public entry points with it, so every Err(...) inside is an input error.
inline Status AsInputError(Status status) {
  if (!status.ok() && status.code() == StatusCode::kUnknown) {
    return status.WithCode(StatusCode::kInvalidArgument);
  }
  return status;
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : state_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    MOTLEY_CHECK(!std::get<Status>(state_).ok(), "Result built from an ok Status has no value");
  }
  bool ok() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return ok(); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(state_);
  }
  T& value() & {
    MOTLEY_CHECK(ok(), "Result::value() on error: " + status().message());
    return std::get<T>(state_);
  }
  const T& value() const& {
    MOTLEY_CHECK(ok(), "Result::value() on error: " + status().message());
    return std::get<T>(state_);
  }
  T&& value() && {
    MOTLEY_CHECK(ok(), "Result::value() on error: " + status().message());
    return std::get<T>(std::move(state_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> state_;
};

// AsInputError for a Result: the value passes through, an error is classified as above.
template <typename T>
Result<T> AsInputError(Result<T> result) {
  if (result.ok()) return result;
  return AsInputError(result.status());
}

}  // namespace motley

// Propagates an error Status from an expression returning Status.
#define MOTLEY_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::motley::Status motley_status_ = (expr);        \
    if (!motley_status_.ok()) return motley_status_; \
  } while (0)

#define MOTLEY_CONCAT_INNER(a, b) a##b
#define MOTLEY_CONCAT(a, b) MOTLEY_CONCAT_INNER(a, b)

// MOTLEY_ASSIGN_OR_RETURN(auto x, ParseThing(...)); returns the error Status on failure.
#define MOTLEY_ASSIGN_OR_RETURN(lhs, expr) \
  MOTLEY_ASSIGN_OR_RETURN_IMPL(MOTLEY_CONCAT(motley_result_, __LINE__), lhs, expr)
#define MOTLEY_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
