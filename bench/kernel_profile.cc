#include "bench/kernel_profile.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <type_traits>
#include <utility>

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

namespace kp::bench {

std::string KernelFamily(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("kp::runtime::cuda")) return "kp";
  if (has("flash") || has("fmha") || has("attention") || has("Attention")) return "attention";
  if (has("gemm") || has("Gemm") || has("cutlass") || has("nvjet") || has("xmma") || has("sm90_") ||
      has("GroupedMM") || has("grouped"))
    return "gemm";
  if (has("multi_tensor_apply") || has("Adam") || has("adam")) return "optimizer";
  if (has("reduce") || has("Reduce") || has("softmax") || has("norm") || has("scan") || has("cumsum") ||
      has("sort") || has("topk"))
    return "reduction";
  if (has("copy") || has("Copy") || has("Memcpy") || has("Memset") || has("cat") || has("index") ||
      has("gather") || has("scatter"))
    return "copy";
  if (has("elementwise") || has("vectorized") || has("unrolled")) return "elementwise";
  return "other";
}

void PrintKernelProfile(const std::vector<KernelTime>& kernels, int reps, std::size_t top) {
  double total = 0;
  std::map<std::string, double> by_family;
  for (const KernelTime& k : kernels) {
    total += k.ms;
    by_family[k.family] += k.ms;
  }
  std::printf("profile: %d steps, %.1f ms of GPU kernel time per step, %zu distinct kernels\n", reps, total / reps,
              kernels.size());
  std::printf("%-10s %9s %7s %6s  %s\n", "family", "ms/step", "share", "calls", "kernel");
  for (std::size_t i = 0; i < std::min(top, kernels.size()); ++i) {
    const KernelTime& k = kernels[i];
    std::printf("%-10s %9.3f %6.1f%% %6d  %.110s\n", k.family.c_str(), k.ms / reps, 100 * k.ms / total,
                k.calls / reps, k.name.c_str());
  }
  std::printf("PROFILE");
  for (const auto& [family, ms] : by_family) std::printf(" %s=%.4f", family.c_str(), ms / total);
  std::printf(" kernel_ms_per_step=%.3f\n", total / reps);
}

#if TORCH_VERSION_MAJOR >= 2
namespace {

namespace prof = torch::autograd::profiler;

// KinetoEvent's duration is durationNs() in newer LibTorch, durationUs()
// in older; whichever this one has.
template <typename E>
auto DurationMs(const E& e, int) -> decltype(e.durationNs(), double()) {
  return static_cast<double>(e.durationNs()) / 1e6;
}
template <typename E>
double DurationMs(const E& e, long) {
  return static_cast<double>(e.durationUs()) / 1e3;
}

}  // namespace

Result<std::vector<KernelTime>> ProfileKernels(const std::function<void()>& work) {
  using torch::profiler::impl::ActivityType;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  const std::set<ActivityType> activities = {ActivityType::CPU, ActivityType::CUDA};
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  work();
  const std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  std::map<std::string, KernelTime> by_name;
  for (const prof::KinetoEvent& e : result->events()) {
    if (e.deviceType() != c10::DeviceType::CUDA) continue;
    KernelTime& k = by_name[e.name()];
    k.name = e.name();
    k.ms += DurationMs(e, 0);
    ++k.calls;
  }
  std::vector<KernelTime> kernels;
  for (auto& [name, k] : by_name) {
    k.family = KernelFamily(name);
    kernels.push_back(std::move(k));
  }
  std::sort(kernels.begin(), kernels.end(), [](const KernelTime& a, const KernelTime& b) { return a.ms > b.ms; });
  return kernels;
}
#else
Result<std::vector<KernelTime>> ProfileKernels(const std::function<void()>&) {
  return Status::InvalidArgument("--profile needs LibTorch 2 (Kineto); this one is " TORCH_VERSION);
}
#endif

}  // namespace kp::bench
