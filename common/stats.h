// Summary statistics of measured series (step times, rewards), as the
// commands report them.
#ifndef KIMI_PLAN_COMMON_STATS_H_
#define KIMI_PLAN_COMMON_STATS_H_

#include <algorithm>
#include <cstddef>
#include <vector>

namespace kp {

/// The upper median (v[n / 2] of the sorted values); 0 for an empty series.
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// The mean of v[from, to); 0 when the range is empty.
inline double MeanOf(const std::vector<double>& v, std::size_t from, std::size_t to) {
  double s = 0;
  for (std::size_t i = from; i < to; ++i) s += v[i];
  return to > from ? s / static_cast<double>(to - from) : 0;
}

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_STATS_H_
