// Range checks of integers and numbers read from flags and files, with the
// one-line messages every command uses: the name of the flag or field, what
// is allowed, and what was given ("--nodes: must be at most 131072, got
// 536870914"; "--bucket-gib: must be a finite number, got inf").
#ifndef KIMI_PLAN_COMMON_RANGE_H_
#define KIMI_PLAN_COMMON_RANGE_H_

#include <cstdint>
#include <string>

#include "common/status.h"

namespace kp {

/// Ok when min <= v <= max; else InvalidArgument naming `name`: below the
/// range "must be a positive integer" (min 1), ">= 0" (min 0) or "at least
/// MIN", with ", got V (at most MAX)"; above it "must be at most MAX, got V".
Status CheckIntRange(const std::string& name, std::int64_t v, std::int64_t min, std::int64_t max);

/// Parses all of `text` as a base-10 integer and checks it with
/// CheckIntRange. Text that is not an integer (empty, "1.5", "1e3", "12abc")
/// is refused with the range; one beyond 64 bits as beyond the range.
Result<std::int64_t> ParseIntInRange(const std::string& name, const std::string& text, std::int64_t min,
                                     std::int64_t max);

/// Ok when `v` is finite and min <= v <= max (min < v when `min_open`); else
/// InvalidArgument naming `name`: "must be a finite number, got inf" for inf
/// and nan, "must be >= MIN and <= MAX, got V" (">" when open) otherwise.
Status CheckNumberRange(const std::string& name, double v, double min, double max, bool min_open = false);

/// Parses all of `text` as a decimal number (strtod's syntax) and checks it
/// with CheckNumberRange; a value that overflows a double is not finite.
Result<double> ParseNumberInRange(const std::string& name, const std::string& text, double min, double max,
                                  bool min_open = false);

/// A number as the messages show it: integers without a fraction, others in
/// the shortest form that reads back ("0.5", "1e+300", "inf", "nan").
std::string ShowNumber(double v);

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_RANGE_H_
