#include "ferry/base/status.h"

namespace ferry {

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) {
    state_ = std::make_shared<const State>(State{code, std::move(message)});
  }
}

const std::string& Status::message() const noexcept {
  static const std::string kEmpty;
  return ok() ? kEmpty : state_->message;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code())) + ": " + state_->message;
}

int Status::ToErrno() const noexcept {
  switch (code()) {
    case StatusCode::kOk:
      return 0;
    case StatusCode::kInvalid:
    case StatusCode::kTypeError:
    case StatusCode::kIndexError:
      return EINVAL;
    case StatusCode::kOutOfMemory:
      return ENOMEM;
    case StatusCode::kNotImplemented:
      return ENOSYS;
    case StatusCode::kIOError:
      return EIO;
    case StatusCode::kCancelled:
      return ECANCELED;
    case StatusCode::kTimedOut:
      return ETIMEDOUT;
    case StatusCode::kUnknownError:
      return EIO;
  }
  return EIO;
}

Status Status::FromErrno(int errno_code, std::string message) {
  switch (errno_code) {
    case 0:
      return Status::OK();
    case EINVAL:
      return Invalid(std::move(message));
    case ENOMEM:
      return OutOfMemory(std::move(message));
    case ENOSYS:
      return NotImplemented(std::move(message));
    case EIO:
      return IOError(std::move(message));
    case ECANCELED:
      return Cancelled(std::move(message));
    case ETIMEDOUT:
      return TimedOut(std::move(message));
    default:
      return UnknownError(std::move(message));
  }
}

Status Status::WithPrefix(std::string_view prefix) const {
  if (ok()) return *this;
  return Status(code(), std::string(prefix) + state_->message);
}

const char* StatusCodeName(StatusCode code) noexcept {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalid:
      return "Invalid";
    case StatusCode::kTypeError:
      return "Type error";
    case StatusCode::kIndexError:
      return "Index error";
    case StatusCode::kOutOfMemory:
      return "Out of memory";
    case StatusCode::kNotImplemented:
      return "Not implemented";
    case StatusCode::kIOError:
      return "IO error";
    case StatusCode::kCancelled:
      return "Cancelled";
    case StatusCode::kTimedOut:
      return "Timed out";
    case StatusCode::kUnknownError:
      return "Unknown error";
  }
  return "Unknown error";
}

}  // namespace ferry
