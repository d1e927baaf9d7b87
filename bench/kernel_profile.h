// kimi-plan-train-bench --profile: the GPU kernels of a piece of work by
// time, through LibTorch's Kineto profiler (LibTorch 2 with Kineto only), and
// each kernel's family, so a change to the step shows in a number.
#ifndef KIMI_PLAN_BENCH_KERNEL_PROFILE_H_
#define KIMI_PLAN_BENCH_KERNEL_PROFILE_H_

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace kp::bench {

struct KernelTime {
  std::string name;
  std::string family;  ///< KernelFamily(name)
  double ms = 0;       ///< summed over calls
  int calls = 0;
};

/// The family of a CUDA kernel by its name: "gemm", "attention", "kp" (this
/// project's kernels: KDA, the depth read, RMSNorm), "elementwise",
/// "reduction", "copy", "optimizer" (multi-tensor apply) or "other".
std::string KernelFamily(const std::string& kernel_name);

/// Runs `work` under the profiler and returns its GPU kernels, longest total
/// first. An error where this LibTorch has no Kineto profiler.
Result<std::vector<KernelTime>> ProfileKernels(const std::function<void()>& work);

/// Prints `kernels` (ProfileKernels' answer for `reps` repetitions of a
/// piece of work) as a table of the `top` longest per repetition, then one
/// `PROFILE family=share ... kernel_ms_per_step=` line.
void PrintKernelProfile(const std::vector<KernelTime>& kernels, int reps, std::size_t top = 20);

}  // namespace kp::bench

#endif  // KIMI_PLAN_BENCH_KERNEL_PROFILE_H_
