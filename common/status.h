// Errors as values. Libraries return Status or Result<T>; only main() turns
// an error into an exit code. A Status carries a kind (which decides the exit
// code) and a one-line message that names the offending field and what is
// allowed, e.g. "--tp: 3 does not divide 64 attention heads".
//
// Thread-safety: plain values.
#ifndef KIMI_PLAN_COMMON_STATUS_H_
#define KIMI_PLAN_COMMON_STATUS_H_

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace kp {

/// Errors are values (the libraries never exit): a Status a caller drops is
/// an error it forgot, so the compiler says so.
class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,  ///< the user's input is wrong: exit code 2
    kNotFound,         ///< a named preset, run or file does not exist: exit 2
    kIoError,          ///< the filesystem or the database failed: exit 1
    kInternal,         ///< a bug: exit 1
  };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return Status(Code::kInvalidArgument, std::move(m)); }
  static Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
  static Status IoError(std::string m) { return Status(Code::kIoError, std::move(m)); }
  static Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  /// The process exit code main() should use for this status.
  int ExitCode() const;
  /// Prefixes the message with context, e.g. the file being parsed.
  Status WithContext(const std::string& context) const;

 private:
  Status(Code c, std::string m) : code_(c), message_(std::move(m)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

/// Either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}            // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}     // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  const T& value() const& { return std::get<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  const T* operator->() const { return &std::get<T>(v_); }
  const T& operator*() const { return std::get<T>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kp

/// Returns early from the enclosing function when `expr` is a non-ok Status.
#define KP_RETURN_IF_ERROR(expr)              \
  do {                                        \
    ::kp::Status kp_status_ = (expr);         \
    if (!kp_status_.ok()) return kp_status_;  \
  } while (0)

#define KP_CONCAT_INNER_(a, b) a##b
#define KP_CONCAT_(a, b) KP_CONCAT_INNER_(a, b)
/// Declares `lhs` from a Result, returning its Status early on error.
#define KP_ASSIGN_OR_RETURN(lhs, expr)                               \
  auto KP_CONCAT_(kp_result_, __LINE__) = (expr);                    \
  if (!KP_CONCAT_(kp_result_, __LINE__).ok())                        \
    return KP_CONCAT_(kp_result_, __LINE__).status();                \
  lhs = std::move(KP_CONCAT_(kp_result_, __LINE__)).value()

#endif  // KIMI_PLAN_COMMON_STATUS_H_
