// What the runtime's benchmark programs share: how a series of timings is
// summarised, how a timing waits for the device, and how a program reports
// bad arguments and LibTorch errors.
#ifndef KIMI_PLAN_BENCH_BENCH_UTIL_H_
#define KIMI_PLAN_BENCH_BENCH_UTIL_H_

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "bench/bench_options.h"
#include "common/status.h"
#include "runtime/comm/device.h"
#include "runtime/comm/environment.h"

namespace kp::bench {

/// The median of a non-empty series: the middle value, or the mean of the
/// two middle values for an even count.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Waits for the work queued on a CUDA device; nothing on the CPU.
using runtime::Synchronize;

/// The median seconds of `fn` over `reps` runs after `warmup` untimed ones,
/// the device synchronised around each run.
template <typename Fn>
double MedianSeconds(const torch::Device& device, int warmup, int reps, Fn fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    Synchronize(device);
    const auto start = std::chrono::steady_clock::now();
    fn();
    Synchronize(device);
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return Median(t);
}

/// The options of the benches that time one product over token counts
/// (kimi-plan-int4-bench, kimi-plan-fp8-bench).
struct ProductBenchOptions {
  torch::Device device = torch::kCUDA;
  int reps = 20, warmup = 5;
  std::vector<std::int64_t> tokens;
};

/// --device (cuda), --reps (20), --warmup (5) and --tokens (comma-separated,
/// `default_tokens`); any other option is an InvalidArgument naming it.
inline Result<ProductBenchOptions> ParseProductBenchOptions(int argc, char** argv, const std::string& default_tokens) {
  bool unused = false;
  KP_ASSIGN_OR_RETURN(auto kv, OptionPairs(argc, argv, "", &unused));
  for (const auto& [k, v] : kv)
    if (k != "device" && k != "reps" && k != "warmup" && k != "tokens")
      return Status::InvalidArgument("unknown option --" + k + " (allowed: --device, --tokens, --reps, --warmup)");
  auto value = [&](const std::string& k, const std::string& fallback) { return kv.count(k) ? kv[k] : fallback; };
  ProductBenchOptions o;
  KP_ASSIGN_OR_RETURN(o.device, runtime::ParseDevice(value("device", "cuda")));
  KP_ASSIGN_OR_RETURN(o.reps, IntOption("reps", value("reps", "20"), 1, 10000));
  KP_ASSIGN_OR_RETURN(o.warmup, IntOption("warmup", value("warmup", "5"), 0, 10000));
  KP_ASSIGN_OR_RETURN(o.tokens, IntListOption("tokens", value("tokens", default_tokens), 1, 1 << 20));
  return o;
}

/// A benchmark's main: bad arguments print their message and exit 2; a
/// LibTorch error prints it and exits 1; otherwise `run`'s exit code. Every
/// line starts with `prefix` (the program's name and ": ", or empty).
template <typename Args>
int BenchMain(const Result<Args>& args, const std::string& prefix, const std::function<int(const Args&)>& run) {
  if (!args.ok()) {
    std::cerr << prefix << args.status().message() << "\n";
    return 2;
  }
  // The benchmarks' main: the only place here that sets the environment.
  for (const runtime::EnvironmentDefault& d : runtime::kEnvironmentDefaults) setenv(d.name, d.value, /*overwrite=*/0);
  try {
    return run(*args);
  } catch (const c10::Error& e) {
    std::cerr << prefix << "LibTorch: " << e.what_without_backtrace() << "\n";
    return 1;
  }
}

/// A run's status as a benchmark's exit code: 0 when ok; else its message
/// after `prefix` on stderr and 2 for bad arguments (InvalidArgument), 1
/// for anything else.
inline int RunExitCode(const Status& s, const std::string& prefix) {
  if (s.ok()) return 0;
  std::cerr << prefix << s.message() << "\n";
  return s.code() == Status::Code::kInvalidArgument ? 2 : 1;
}

}  // namespace kp::bench

#endif  // KIMI_PLAN_BENCH_BENCH_UTIL_H_
