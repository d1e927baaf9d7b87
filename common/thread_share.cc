#include "common/thread_share.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace kp {

namespace {

// A positive decimal integer, or 0 for anything else (OpenMP ignores a
// malformed OMP_NUM_THREADS too, and then uses every core).
long RequestedThreads(const char* requested) {
  if (requested == nullptr || *requested < '0' || *requested > '9') return 0;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(requested, &end, 10);
  if (errno != 0 || *end != '\0' || n < 1) return 0;
  return n;
}

}  // namespace

int ThreadsPerLocalRank(int local_ranks, int cores, const char* requested) {
  const int share = std::max(1, std::max(1, cores) / std::max(1, local_ranks));
  const long asked = RequestedThreads(requested);
  return asked > 0 ? static_cast<int>(std::min<long>(asked, share)) : share;
}

std::string ThreadsPerLocalRankVariable(int local_ranks, int cores, const char* requested) {
  return std::string(kThreadsVariable) + "=" + std::to_string(ThreadsPerLocalRank(local_ranks, cores, requested));
}

}  // namespace kp
