// kimi-plan-fp8-bench: a routed expert's product in the blockwise FP8 recipe
// (runtime/model/fp8_linear.h: e4m3 on tensor cores where the CUDA kernels
// are built) against the same product in bf16, forward and both gradients
// (a trained expert's whole work), at Kimi K2.6's expert shapes and the
// single-GPU benchmark models' (bench/kimi-1b.json, bench/kimi-wide.json),
// for several token counts per expert; and the quantisation of one
// operand's tiles and one weight's blocks alone; then every expert's
// forward product in one launch, bf16's grouped GEMM against the FP8
// grouped kernel (fp8_grouped_gemm.h). Each figure the median of
// --reps after --warmup, the device synchronised around each run. Prints a
// table; docs/benchmarks.md has the H100's and H200's.
//
//   kimi-plan-fp8-bench [--device cuda] [--tokens 512,2048,8192] [--reps 20] [--warmup 5]
//
// Exit codes: 0 success, 2 bad arguments, 1 a LibTorch error.
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include <torch/torch.h>

#include "bench/bench_options.h"
#include "bench/bench_util.h"
#include "runtime/comm/device.h"
#include "runtime/kernels/fp8_gemm.h"
#include "runtime/kernels/fp8_grouped_gemm.h"
#include "runtime/model/fp8_linear.h"

namespace {

// One projection of every expert in one launch: bf16's grouped GEMM
// (at::_grouped_mm) against the FP8 grouped kernel, the latter with its
// quantisation (the activations' tiles and the weights' blocks) and alone;
// `tokens` rows for each of `experts` experts, forward only.
void GroupedProducts(const torch::Device& device, int reps, int warmup, const std::vector<std::int64_t>& tokens,
                     bool tensor_cores) {
#if KIMI_PLAN_FP8_KERNELS
  if (!tensor_cores) return;
  const auto opts = torch::TensorOptions().device(device).dtype(torch::kBFloat16);
  std::printf("\ngrouped, forward: one launch for all experts (fp8 = quantisation + product)\n");
  std::printf("%-16s %7s %7s %10s %10s %10s %10s %10s %10s\n", "matrix", "experts", "tokens", "bf16 ms", "fp8 ms",
              "kernel ms", "bf16 TF/s", "fp8 TF/s", "kernel TF/s");
  for (const auto& [name, experts, rows, cols] :
       std::vector<std::tuple<const char*, std::int64_t, std::int64_t, std::int64_t>>{
           {"k2.6 gate/up", 8, 2048, 7168},
           {"k2.6 down", 8, 7168, 2048},
           {"kimi-1b gate/up", 32, 1536, 512},
           {"kimi-1b down", 32, 512, 1536}}) {
    torch::manual_seed(2);
    const torch::Tensor w = torch::randn({experts, rows, cols}, opts) * 0.02;
    const torch::Tensor w_t = w.transpose(1, 2);
    for (std::int64_t t : tokens) {
      const torch::Tensor x = torch::randn({experts * t, cols}, opts);
      const torch::Tensor ends = torch::arange(1, experts + 1, opts.dtype(torch::kInt)) * static_cast<int>(t);
      const double bf16 = kp::bench::MedianSeconds(device, warmup, reps, [&] { at::_grouped_mm(x, w_t, ends); });
      const double fp8 = kp::bench::MedianSeconds(device, warmup, reps, [&] {
        kp::runtime::Fp8GroupedMatmul(kp::runtime::QuantizeFp8(x, false), kp::runtime::QuantizeFp8Experts(w, false),
                                      ends, torch::kBFloat16);
      });
      const kp::runtime::Fp8Operand qx = kp::runtime::QuantizeFp8(x, false);
      const kp::runtime::Fp8Operand qw = kp::runtime::QuantizeFp8Experts(w, false);
      const double kernel = kp::bench::MedianSeconds(
          device, warmup, reps, [&] { kp::runtime::Fp8GroupedMatmul(qx, qw, ends, torch::kBFloat16); });
      const double flops = 2.0 * experts * t * rows * cols;
      std::printf("%-16s %7lld %7lld %10.3f %10.3f %10.3f %10.1f %10.1f %10.1f\n", name,
                  static_cast<long long>(experts), static_cast<long long>(t), bf16 * 1e3, fp8 * 1e3, kernel * 1e3,
                  flops / bf16 / 1e12, flops / fp8 / 1e12, flops / kernel / 1e12);
    }
  }
#else
  (void)device, (void)reps, (void)warmup, (void)tokens, (void)tensor_cores;
#endif
}

kp::Status Run(int argc, char** argv) {
  KP_ASSIGN_OR_RETURN(const kp::bench::ProductBenchOptions options,
                      kp::bench::ParseProductBenchOptions(argc, argv, "512,2048,8192"));
  const torch::Device device = options.device;
  const int reps = options.reps, warmup = options.warmup;
  const std::vector<std::int64_t>& tokens = options.tokens;
  const auto opts = torch::TensorOptions().device(device).dtype(torch::kBFloat16);
  const bool tensor_cores = kp::runtime::Fp8GemmApplies(torch::zeros({1}, opts));
  std::printf("FP8 products: %s\n", tensor_cores ? "tensor cores (e4m3, cuBLASLt blockwise scaling)"
                                                 : "emulated (fake quantisation, fp32 GEMMs)");
  std::printf("%-16s %7s %10s %10s %9s %10s %10s %10s\n", "matrix", "tokens", "bf16 ms", "fp8 ms", "fp8/bf16",
              "bf16 TF/s", "fp8 TF/s", "quant ms");
  for (const auto& [name, rows, cols] : std::vector<std::tuple<const char*, std::int64_t, std::int64_t>>{
           {"k2.6 gate/up", 2048, 7168},
           {"k2.6 down", 7168, 2048},
           {"kimi-1b gate/up", 1536, 512},
           {"kimi-1b down", 512, 1536},
           {"wide gate/up", 512, 4096},
           {"wide down", 4096, 512}}) {
    torch::manual_seed(1);
    const torch::Tensor w = torch::randn({rows, cols}, opts) * 0.02;
    for (std::int64_t t : tokens) {
      const torch::Tensor x = torch::randn({t, cols}, opts), dy = torch::randn({t, rows}, opts);
      auto step = [&](bool fp8) {
        const torch::Tensor xi = x.detach().requires_grad_(true), wi = w.detach().requires_grad_(true);
        const torch::Tensor y = fp8 ? kp::runtime::Fp8Linear(xi, wi) : torch::linear(xi, wi);
        y.backward(dy);
      };
      const double bf16 = kp::bench::MedianSeconds(device, warmup, reps, [&] { step(false); });
      const double fp8 = kp::bench::MedianSeconds(device, warmup, reps, [&] { step(true); });
      double quant = 0;
      if (tensor_cores) {
        quant = kp::bench::MedianSeconds(device, warmup, reps, [&] {
          kp::runtime::QuantizeFp8(x, false);
          kp::runtime::QuantizeFp8(w, true);
        });
      }
      const double flops = 6.0 * t * rows * cols;  // forward, input and weight gradients
      std::printf("%-16s %7lld %10.3f %10.3f %9.2f %10.1f %10.1f %10.3f\n", name, static_cast<long long>(t),
                  bf16 * 1e3, fp8 * 1e3, fp8 / bf16, flops / bf16 / 1e12, flops / fp8 / 1e12, quant * 1e3);
    }
  }
  GroupedProducts(device, reps, warmup, tokens, tensor_cores);
  return kp::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return kp::bench::RunExitCode(Run(argc, argv), "kimi-plan-fp8-bench: ");
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "kimi-plan-fp8-bench: LibTorch: %s\n", e.what_without_backtrace());
    return 1;
  }
}
