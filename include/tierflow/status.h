// Status and StatusOr<T>: how every expected failure in tierflow is reported.
//
// Library code never prints, exits or throws for an expected failure (bad
// input, out of memory, I/O errors); it returns a Status whose message names
// the thing that failed and what to do about it. errno becomes a Status
// exactly once, at the system-call boundary (ErrnoStatus), with the path.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tierflow {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller's input is wrong (flags, shapes, files)
  kNotFound,            // a file, tensor or device is not there
  kOutOfMemory,         // a memory tier (device, host, pinned) is full
  kResourceExhausted,   // disk full, memlock limit, queue full
  kDataLoss,            // checksum mismatch, truncated or corrupt file
  kIoError,             // EIO and other I/O failures
  kFailedPrecondition,  // the system is not in a state to do this (stale run, lock held)
  kUnavailable,         // a capability is missing (no GPU, no O_DIRECT)
  kUnimplemented,
  kAborted,   // cancelled (SIGINT) or rolled back
  kInternal,  // a bug in tierflow
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  // The message is kept printable (common/printable.h, PrintableText): bytes
  // that are not UTF-8 and control characters other than newline and tab
  // become \xNN, so an error that quotes outside text (a path, a JSON key,
  // an argument) never puts raw bytes on a terminal or into JSON output.
  Status(StatusCode code, std::string message);

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "OutOfMemory: device memory: asked for ..." or "OK".
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context` and ": ".
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status OutOfMemoryError(std::string message);
Status ResourceExhaustedError(std::string message);
Status DataLossError(std::string message);
Status IoError(std::string message);
Status FailedPreconditionError(std::string message);
Status UnavailableError(std::string message);
Status UnimplementedError(std::string message);
Status AbortedError(std::string message);
Status InternalError(std::string message);

// Maps an errno value to a Status: ENOSPC -> ResourceExhausted, ENOENT ->
// NotFound, EIO -> IoError, ... `what` names the operation and the path,
// e.g. "write /nvme/run-1/state.bin at offset 4096".
Status ErrnoStatus(int errno_value, std::string_view what);

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.ok() && "StatusOr constructed from an OK status without a value");
    if (status_.ok()) status_ = Status(StatusCode::kInternal, "StatusOr built from OK status");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace tierflow

#define TF_CONCAT_INNER_(a, b) a##b
#define TF_CONCAT_(a, b) TF_CONCAT_INNER_(a, b)

// Returns early from the enclosing function if `expr` (a Status) is not OK.
#define TF_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::tierflow::Status tf_status_ = (expr);  \
    if (!tf_status_.ok()) return tf_status_; \
  } while (0)

// `TF_ASSIGN_OR_RETURN(auto x, MakeX());` unwraps a StatusOr or returns its error.
#define TF_ASSIGN_OR_RETURN(lhs, expr) \
  TF_ASSIGN_OR_RETURN_IMPL_(TF_CONCAT_(tf_statusor_, __LINE__), lhs, expr)
#define TF_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
