// Status and Result<T>: Ferry's error idiom inside C++. Success is a null
// pointer (cheap to return and test); an error carries a code and a message
// that names the column path and the rule that failed. No exception crosses a
// C ABI, a thread or a process boundary: convert a Status to a code there.
#pragma once

#include <cerrno>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace ferry {

enum class StatusCode : int {
  kOk = 0,
  kInvalid,         // malformed input: a format string, an array, a YAML file
  kTypeError,       // a value of the wrong type
  kIndexError,      // an index or offset outside its range
  kOutOfMemory,     // an allocation failed
  kNotImplemented,  // a valid request Ferry does not support
  kIOError,         // an operating-system call failed
  kCancelled,       // the operation was cancelled
  kTimedOut,        // a wait ran past its deadline
  kUnknownError,    // anything else, e.g. a foreign callback returning an unknown code
};

// Thread-compatible value type: copying shares the immutable error state.
class [[nodiscard]] Status {
 public:
  Status() noexcept = default;
  Status(StatusCode code, std::string message);

  static Status OK() noexcept { return Status(); }
  static Status Invalid(std::string message) { return {StatusCode::kInvalid, std::move(message)}; }
  static Status TypeError(std::string message) {
    return {StatusCode::kTypeError, std::move(message)};
  }
  static Status IndexError(std::string message) {
    return {StatusCode::kIndexError, std::move(message)};
  }
  static Status OutOfMemory(std::string message) {
    return {StatusCode::kOutOfMemory, std::move(message)};
  }
  static Status NotImplemented(std::string message) {
    return {StatusCode::kNotImplemented, std::move(message)};
  }
  static Status IOError(std::string message) { return {StatusCode::kIOError, std::move(message)}; }
  static Status Cancelled(std::string message) {
    return {StatusCode::kCancelled, std::move(message)};
  }
  static Status TimedOut(std::string message) {
    return {StatusCode::kTimedOut, std::move(message)};
  }
  static Status UnknownError(std::string message) {
    return {StatusCode::kUnknownError, std::move(message)};
  }
  // Maps an errno-style code (as returned by Arrow C stream callbacks) to a Status.
  static Status FromErrno(int errno_code, std::string message);

  bool ok() const noexcept { return state_ == nullptr; }
  StatusCode code() const noexcept { return ok() ? StatusCode::kOk : state_->code; }
  // Empty for OK.
  const std::string& message() const noexcept;
  // "Invalid: <message>", or "OK".
  std::string ToString() const;
  // An errno-compatible code for the C ABI: 0, EINVAL, ENOMEM, ENOSYS, EIO, ECANCELED, ETIMEDOUT.
  int ToErrno() const noexcept;
  // Returns a copy whose message is "<prefix><message>" (e.g. to add a column path).
  Status WithPrefix(std::string_view prefix) const;

  bool operator==(const Status& other) const noexcept {
    return code() == other.code() && message() == other.message();
  }

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const State> state_;
};

const char* StatusCodeName(StatusCode code) noexcept;

// Holds either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value)
      : storage_(std::move(value)) {}  // NOLINT(google-explicit-constructor): ergonomic returns
  Result(Status status) : storage_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(storage_).ok()) {
      storage_ = Status::UnknownError("Result constructed from an OK Status without a value");
    }
  }
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U&&, T> &&
                                                    !std::is_same_v<std::decay_t<U>, T> &&
                                                    !std::is_same_v<std::decay_t<U>, Status>>>
  Result(U&& value) : storage_(T(std::forward<U>(value))) {}  // NOLINT(google-explicit-constructor)

  bool ok() const noexcept { return std::holds_alternative<T>(storage_); }
  const Status& status() const& noexcept {
    static const Status kOk;
    return ok() ? kOk : *std::get_if<Status>(&storage_);  // get_if: nothing to throw
  }
  Status status() && { return ok() ? Status::OK() : std::get<Status>(std::move(storage_)); }

  // Precondition: ok().
  const T& ValueUnsafe() const& { return std::get<T>(storage_); }
  T& ValueUnsafe() & { return std::get<T>(storage_); }
  T MoveValueUnsafe() { return std::get<T>(std::move(storage_)); }
  const T& operator*() const& { return ValueUnsafe(); }
  T& operator*() & { return ValueUnsafe(); }
  const T* operator->() const { return &ValueUnsafe(); }
  T* operator->() { return &ValueUnsafe(); }
  // Returns the value or `fallback` when this holds an error.
  T ValueOr(T fallback) && { return ok() ? MoveValueUnsafe() : std::move(fallback); }

 private:
  std::variant<T, Status> storage_;
};

}  // namespace ferry

#define FERRY_CONCAT_INNER(a, b) a##b
#define FERRY_CONCAT(a, b) FERRY_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` is not OK.
#define FERRY_RETURN_NOT_OK(expr)                  \
  do {                                             \
    ::ferry::Status _ferry_status = (expr);        \
    if (!_ferry_status.ok()) return _ferry_status; \
  } while (false)

// `lhs` may be a declaration ("auto x"), which parentheses would break.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define FERRY_ASSIGN_OR_RAISE_IMPL(result_name, lhs, rexpr)      \
  auto&& result_name = (rexpr);                                  \
  if (!result_name.ok()) return std::move(result_name).status(); \
  lhs = std::move(result_name).MoveValueUnsafe()
// NOLINTEND(bugprone-macro-parentheses)

// Evaluates `rexpr` (a Result<T>); returns its error, or assigns its value to `lhs`.
#define FERRY_ASSIGN_OR_RAISE(lhs, rexpr) \
  FERRY_ASSIGN_OR_RAISE_IMPL(FERRY_CONCAT(_ferry_result_, __COUNTER__), lhs, rexpr)
