#include "common/range.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "common/text.h"

namespace kp {

namespace {

std::string IntBelow(std::int64_t min) {
  if (min == 1) return "a positive integer";
  if (min == 0) return ">= 0";
  return "at least " + std::to_string(min);
}

Status IntRangeError(const std::string& name, const std::string& got, bool below, std::int64_t min,
                     std::int64_t max) {
  if (below)
    return Status::InvalidArgument(name + ": must be " + IntBelow(min) + ", got " + got + " (at most " +
                                   std::to_string(max) + ")");
  return Status::InvalidArgument(name + ": must be at most " + std::to_string(max) + ", got " + got);
}

Status NumberRangeError(const std::string& name, const std::string& got, double min, double max, bool min_open) {
  return Status::InvalidArgument(name + ": must be " + (min_open ? "> " : ">= ") + ShowNumber(min) + " and <= " +
                                 ShowNumber(max) + ", got " + got);
}

}  // namespace

std::string ShowNumber(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  std::ostringstream out;
  out.precision(6);
  out << v;
  return out.str();
}

Status CheckIntRange(const std::string& name, std::int64_t v, std::int64_t min, std::int64_t max) {
  if (v >= min && v <= max) return Status::Ok();
  return IntRangeError(name, std::to_string(v), v < min, min, max);
}

Result<std::int64_t> ParseIntInRange(const std::string& name, const std::string& text, std::int64_t min,
                                     std::int64_t max) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(begin, &end, 10);
  if (text.empty() || end == begin || *end != '\0' || std::isspace(static_cast<unsigned char>(text[0])))
    return Status::InvalidArgument(name + ": must be an integer from " + std::to_string(min) + " to " +
                                   std::to_string(max) + ", got \"" + QuoteBounded(text) + "\"");
  if (errno == ERANGE) return IntRangeError(name, QuoteBounded(text), v < 0, min, max);
  KP_RETURN_IF_ERROR(CheckIntRange(name, v, min, max));
  return static_cast<std::int64_t>(v);
}

namespace {
Status DenormalError(const std::string& name, const std::string& shown) {
  return Status::InvalidArgument(name + ": must be 0 or a normal number (magnitude at least 2.2e-308), got " + shown);
}
}  // namespace

Status CheckNumberRange(const std::string& name, double v, double min, double max, bool min_open) {
  if (!std::isfinite(v)) return Status::InvalidArgument(name + ": must be a finite number, got " + ShowNumber(v));
  // A denormal passes "> 0" but divides into infinity: no real input is one.
  if (std::fpclassify(v) == FP_SUBNORMAL) return DenormalError(name, ShowNumber(v));
  if ((min_open ? v > min : v >= min) && v <= max) return Status::Ok();
  return NumberRangeError(name, ShowNumber(v), min, max, min_open);
}

Result<double> ParseNumberInRange(const std::string& name, const std::string& text, double min, double max,
                                  bool min_open) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  if (text.empty() || end == begin || *end != '\0' || std::isspace(static_cast<unsigned char>(text[0])))
    return Status::InvalidArgument(name + ": must be a number " + (min_open ? "> " : ">= ") + ShowNumber(min) +
                                   " and <= " + ShowNumber(max) + ", got \"" + QuoteBounded(text) + "\"");
  if (!std::isfinite(v)) return Status::InvalidArgument(name + ": must be a finite number, got " + QuoteBounded(text));
  if (std::fpclassify(v) == FP_SUBNORMAL) return DenormalError(name, QuoteBounded(text));  // as the user wrote it
  KP_RETURN_IF_ERROR(CheckNumberRange(name, v, min, max, min_open));
  return v;
}

}  // namespace kp
