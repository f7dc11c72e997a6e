// Status codes, names and the errno mapping used at every system-call boundary.
#include "tierflow/status.h"

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "common/printable.h"

namespace tierflow {

Status::Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {
  message_ = PrintableText(message_);
}

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kOutOfMemory:
      return "OutOfMemory";
    case StatusCode::kResourceExhausted:
      return "ResourceExhausted";
    case StatusCode::kDataLoss:
      return "DataLoss";
    case StatusCode::kIoError:
      return "IoError";
    case StatusCode::kFailedPrecondition:
      return "FailedPrecondition";
    case StatusCode::kUnavailable:
      return "Unavailable";
    case StatusCode::kUnimplemented:
      return "Unimplemented";
    case StatusCode::kAborted:
      return "Aborted";
    case StatusCode::kInternal:
      return "Internal";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(StatusCodeName(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += message_;
  return Status(code_, std::move(msg));
}

Status InvalidArgumentError(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
Status NotFoundError(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
Status OutOfMemoryError(std::string m) { return Status(StatusCode::kOutOfMemory, std::move(m)); }
Status ResourceExhaustedError(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
}
Status DataLossError(std::string m) { return Status(StatusCode::kDataLoss, std::move(m)); }
Status IoError(std::string m) { return Status(StatusCode::kIoError, std::move(m)); }
Status FailedPreconditionError(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
Status UnavailableError(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }
Status UnimplementedError(std::string m) {
  return Status(StatusCode::kUnimplemented, std::move(m));
}
Status AbortedError(std::string m) { return Status(StatusCode::kAborted, std::move(m)); }
Status InternalError(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }

Status ErrnoStatus(int errno_value, std::string_view what) {
  std::string msg(what);
  msg += ": ";
  msg += std::strerror(errno_value);
  msg += " (errno ";
  msg += std::to_string(errno_value);
  msg += ")";
  switch (errno_value) {
    case ENOENT:
      return NotFoundError(std::move(msg));
    case ENOSPC:
      msg += "; the disk is full: free space or point the state directory at another drive";
      return ResourceExhaustedError(std::move(msg));
    case EDQUOT:
      msg += "; the disk quota is exhausted";
      return ResourceExhaustedError(std::move(msg));
    case ENOMEM:
      return OutOfMemoryError(std::move(msg));
    case EROFS:
      msg += "; the file system is read-only: choose a writable directory";
      return FailedPreconditionError(std::move(msg));
    case EACCES:
    case EPERM:
      return FailedPreconditionError(std::move(msg));
    case EINVAL:
      return InvalidArgumentError(std::move(msg));
    case EAGAIN:
      return UnavailableError(std::move(msg));
    default:
      return IoError(std::move(msg));
  }
}

}  // namespace tierflow
