#include "common/status.h"

namespace kp {

int Status::ExitCode() const {
  switch (code_) {
    case Code::kOk: return 0;
    case Code::kInvalidArgument:
    case Code::kNotFound: return 2;
    case Code::kIoError:
    case Code::kInternal: return 1;
  }
  return 1;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

}  // namespace kp
