// The one-line messages of flag values that every command shares beyond
// numbers (common/range.h): a choice between two words, on/off, and a flag
// given without the setting it needs. Flags are named without their "--".
#ifndef KIMI_PLAN_COMMON_FLAG_VALUES_H_
#define KIMI_PLAN_COMMON_FLAG_VALUES_H_

#include <string>

#include "common/status.h"

namespace kp {

/// `first_value` when `value` is `first`, `second_value` when it is
/// `second`; else InvalidArgument "--FLAG: must be FIRST or SECOND, got
/// \"VALUE\"".
template <typename T>
Result<T> ParseEither(const std::string& flag, const std::string& value, const char* first, T first_value,
                      const char* second, T second_value) {
  if (value == first) return first_value;
  if (value == second) return second_value;
  return Status::InvalidArgument("--" + flag + ": must be " + first + " or " + second + ", got \"" + value + "\"");
}

/// "on" or "off" (ParseEither).
Result<bool> ParseOnOff(const std::string& flag, const std::string& value);

/// Ok unless the flag was `given` while `holds` is false: then
/// InvalidArgument "--FLAG: needs WHAT; without it the flag does nothing":
/// a flag that would do nothing is refused rather than silently ignored.
Status FlagNeedsSetting(const std::string& flag, bool given, bool holds, const std::string& what);

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_FLAG_VALUES_H_
