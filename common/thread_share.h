// How many intra-op threads each process of a multi-process launch on one
// machine may run. OpenMP teams wait for each other by spinning, so more
// threads than cores among the ranks of one launch make every rank slower
// (measured on 2 cores: 4 ranks of pp 2 x dp 2 with OMP_NUM_THREADS=2 took
// 22.4 s for 20 steps, with 1 thread each 5.7 s). torchrun gives each rank
// one thread for the same reason.
#ifndef KIMI_PLAN_COMMON_THREAD_SHARE_H_
#define KIMI_PLAN_COMMON_THREAD_SHARE_H_

#include <string>

namespace kp {

/// The environment variable LibTorch's and OpenBLAS's thread pools read.
inline constexpr const char* kThreadsVariable = "OMP_NUM_THREADS";

/// Each of `local_ranks` processes on a machine of `cores` cores gets its
/// equal share of the cores, at least 1, and never more than `requested`
/// (the launcher's own OMP_NUM_THREADS; null, or anything but a positive
/// decimal integer, asks for nothing). `local_ranks` and `cores` below 1
/// count as 1.
int ThreadsPerLocalRank(int local_ranks, int cores, const char* requested);

/// "OMP_NUM_THREADS=N" with N from ThreadsPerLocalRank, for a rank's
/// environment.
std::string ThreadsPerLocalRankVariable(int local_ranks, int cores, const char* requested);

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_THREAD_SHARE_H_
