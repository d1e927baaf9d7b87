// kimi-plan-kda-bench: KDA's chunked gated delta rule alone, the torch form
// (a [.., C, C, dk] decay tensor) against the CUDA intra-chunk kernel
// (runtime/kernels/kda.h) with its chunk scan in fp32 ("kernel") and on
// tensor cores ("tcore"), forward and forward + backward, in ms and
// peak GB, at the kimi-1b layer shape by default. docs/benchmarks.md has the
// command and the numbers.
//
//   kimi-plan-kda-bench [--batch 16] [--seq-len 1024] [--heads 8] [--dk 128]
//       [--dv 128] [--iters 10] [--device cuda] [--profile 0]
//
// --profile N: N more forward + backward passes of the kernel forms at chunk
// 32 (fp32, then tensor cores) under the profiler, their kernels by time
// (LibTorch 2 with Kineto).
//
// Output: a table, then one `RESULT` line per row. Exit 2 on bad arguments.
#include <cstdio>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "bench/bench_util.h"
#include "bench/kernel_profile.h"
#include "common/file_system.h"
#include "runtime/comm/device.h"
#include "runtime/model/attention.h"
#include "runtime/kernels/kernels.h"
#include "runtime/model/layers.h"

namespace {

using kp::Result;
using kp::Status;
using kp::bench::Median;
using kp::bench::Synchronize;

struct Args {
  int batch = 16, seq_len = 1024, heads = 8, dk = 128, dv = 128, iters = 10, profile = 0;
  std::string device = "cuda";
};

Result<Args> ParseArgs(int argc, char** argv) {
  Args a;
  bool help = false;
  KP_ASSIGN_OR_RETURN(const auto kv, kp::bench::OptionPairs(argc, argv, "help", &help));
  if (help)
    return Status::InvalidArgument(
        "usage: kimi-plan-kda-bench [--batch 16] [--seq-len 1024] [--heads 8] [--dk 128] [--dv 128] [--iters 10] "
        "[--device cuda] [--profile 0]");
  const std::map<std::string, int*> positive = {{"batch", &a.batch}, {"seq-len", &a.seq_len}, {"heads", &a.heads},
                                                {"dk", &a.dk},       {"dv", &a.dv},           {"iters", &a.iters}};
  for (const auto& [k, v] : kv) {
    if (auto it = positive.find(k); it != positive.end()) {
      KP_ASSIGN_OR_RETURN(*it->second, kp::bench::IntOption(k, v, 1));
    } else if (k == "device") {
      a.device = v;
    } else if (k == "profile") {
      KP_ASSIGN_OR_RETURN(a.profile, kp::bench::IntOption(k, v, 0));
    } else {
      return Status::InvalidArgument("unknown option --" + k);
    }
  }
  return a;
}

struct Inputs {
  std::vector<torch::Tensor> qkvgb;  // q, k, v, g, beta
};

// As KdaImpl makes them: unit k, q / sqrt(dk), g = -softplus(.) <= 0, beta in (0, 1).
Inputs MakeInputs(const Args& a, const torch::Device& d) {
  kp::runtime::Init init(17);
  auto normal = [&](std::vector<std::int64_t> shape) { return init.Normal(shape, 1.0).to(d); };
  auto unit = [](const torch::Tensor& x) { return x / x.norm(2, -1, true); };
  const std::int64_t b = a.batch, t = a.seq_len, h = a.heads;
  Inputs in;
  in.qkvgb = {unit(normal({b, t, h, a.dk})) / std::sqrt(double(a.dk)), unit(normal({b, t, h, a.dk})),
              normal({b, t, h, a.dv}), -torch::softplus(normal({b, t, h, a.dk}) - 2.0),
              torch::sigmoid(normal({b, t, h}))};
  return in;
}

struct Row {
  std::string name;
  int chunk;
  bool fused;
  kp::runtime::KdaMath math = kp::runtime::KdaMath::kFp32;
};

struct Timing {
  double forward_ms, train_ms, forward_gb, train_gb;
};

// One forward and backward of `row`'s form on fresh leaves of `in`.
std::function<void()> TrainPass(const Row& row, const Inputs& in) {
  std::vector<torch::Tensor> leaves;
  for (const torch::Tensor& x : in.qkvgb) leaves.push_back(x.detach().requires_grad_(true));
  return [row, leaves] {
    const torch::Tensor o =
        kp::runtime::KdaChunked(leaves[0], leaves[1], leaves[2], leaves[3], leaves[4], row.chunk, {}, nullptr, row.fused,
                                row.math);
    torch::autograd::grad({o.sum()}, leaves);
  };
}

Timing Measure(const Row& row, const Inputs& in, const torch::Device& d, int iters) {
  kp::RealFileSystem fs;
  std::vector<torch::Tensor> leaves;
  for (const torch::Tensor& x : in.qkvgb) leaves.push_back(x.detach().requires_grad_(true));
  auto forward = [&] {
    return kp::runtime::KdaChunked(leaves[0], leaves[1], leaves[2], leaves[3], leaves[4], row.chunk, {}, nullptr,
                                   row.fused, row.math);
  };
  auto time = [&](const std::function<void()>& f, double* peak_gb) {
    f();  // warm-up (and the first call's allocations)
    Synchronize(d);
    kp::runtime::ResetPeakMemory(d);
    const double ms = kp::bench::MedianSeconds(d, /*warmup=*/0, iters, f) * 1e3;
    *peak_gb = kp::runtime::PeakMemoryBytes(d, fs) / 1e9;
    return ms;
  };
  Timing t{};
  t.forward_ms = time(
      [&] {
        torch::NoGradGuard no_grad;
        forward();
      },
      &t.forward_gb);
  t.train_ms = time(TrainPass(row, in), &t.train_gb);
  return t;
}

int Profile(const Row& row, const Inputs& in, const torch::Device& d, int reps) {
  const std::function<void()> pass = TrainPass(row, in);
  Result<std::vector<kp::bench::KernelTime>> kernels = kp::bench::ProfileKernels([&] {
    for (int i = 0; i < reps; ++i) pass();
    Synchronize(d);
  });
  if (!kernels.ok()) {
    std::fprintf(stderr, "%s\n", kernels.status().message().c_str());
    return 2;
  }
  std::printf("%s forward + backward under the profiler:\n", row.name.c_str());
  kp::bench::PrintKernelProfile(*kernels, reps, 25);
  return 0;
}

int Run(const Args& a) {
  const torch::Device d(a.device);
  const Inputs in = MakeInputs(a, d);
  Synchronize(d);
  kp::RealFileSystem fs;
  const double inputs_gb = kp::runtime::PeakMemoryBytes(d, fs) / 1e9;
  std::printf("KDA layer: %d x %d tokens, %d heads, dk %d, dv %d, fp32; kernels built: %s; inputs %.2f GB\n",
              a.batch, a.seq_len, a.heads, a.dk, a.dv, kp::runtime::CudaKernelsBuilt() ? "yes" : "no", inputs_gb);
  constexpr kp::runtime::KdaMath kTc = kp::runtime::KdaMath::kTensorCores;
  const std::vector<Row> rows = {{"torch C=16", 16, false}, {"torch C=32", 32, false}, {"kernel C=16", 16, true},
                                 {"kernel C=32", 32, true},  {"kernel C=64", 64, true}, {"tcore C=16", 16, true, kTc},
                                 {"tcore C=32", 32, true, kTc}, {"tcore C=64", 64, true, kTc}};
  std::printf("%-12s %12s %10s %14s %10s\n", "form", "forward ms", "peak GB", "fwd+bwd ms", "peak GB");
  for (const Row& row : rows) {
    if (row.fused && !kp::runtime::KdaIntraKernelApplies(torch::zeros({1, row.chunk, a.dk}, in.qkvgb[0].options()))) {
      std::printf("%-12s (the kernel does not apply on this device or build)\n", row.name.c_str());
      continue;
    }
    const Timing t = Measure(row, in, d, a.iters);
    std::printf("%-12s %12.2f %10.2f %14.2f %10.2f\n", row.name.c_str(), t.forward_ms, t.forward_gb, t.train_ms,
                t.train_gb);
    std::printf("RESULT form=%s chunk=%d fused=%d forward_ms=%.3f forward_peak_gb=%.3f train_ms=%.3f "
                "train_peak_gb=%.3f\n",
                !row.fused ? "torch" : row.math == kTc ? "tensor_cores" : "kernel", row.chunk, row.fused ? 1 : 0,
                t.forward_ms, t.forward_gb, t.train_ms, t.train_gb);
  }
  if (a.profile <= 0) return 0;
  if (int rc = Profile({"kernel C=32", 32, true}, in, d, a.profile); rc != 0) return rc;
  return Profile({"tcore C=32", 32, true, kTc}, in, d, a.profile);
}

}  // namespace

int main(int argc, char** argv) { return kp::bench::BenchMain<Args>(ParseArgs(argc, argv), "", Run); }
