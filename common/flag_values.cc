#include "common/flag_values.h"

namespace kp {

Result<bool> ParseOnOff(const std::string& flag, const std::string& value) {
  return ParseEither(flag, value, "on", true, "off", false);
}

Status FlagNeedsSetting(const std::string& flag, bool given, bool holds, const std::string& what) {
  if (holds || !given) return Status::Ok();
  return Status::InvalidArgument("--" + flag + ": needs " + what + "; without it the flag does nothing");
}

}  // namespace kp
