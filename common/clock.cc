#include "common/clock.h"

#include <ctime>

namespace kp {

std::string Clock::NowIso8601() const {
  const std::time_t t = static_cast<std::time_t>(Now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace kp
