// kimi-plan-int4-bench: the routed experts' frozen INT4 base (runtime/model/
// int4_linear.h) against the same product on a bf16 weight, at Kimi K2.6's
// expert shapes (gate / up: 2048 x 7168; down: 7168 x 2048), for several
// token counts per expert: the forward and the input gradient (the base is
// frozen), each the median of --reps after --warmup, the device synchronised
// around each; and the dequantization alone. Prints a table; docs/
// benchmarks.md has the H200's.
//
//   kimi-plan-int4-bench [--device cuda] [--tokens 128,512,2048,8192] [--reps 20] [--warmup 5]
//
// Exit codes: 0 success, 2 bad arguments.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "bench/bench_options.h"
#include "bench/bench_util.h"
#include "runtime/comm/device.h"
#include "runtime/model/int4_linear.h"

namespace {

kp::Status Run(int argc, char** argv) {
  KP_ASSIGN_OR_RETURN(const kp::bench::ProductBenchOptions options,
                      kp::bench::ParseProductBenchOptions(argc, argv, "128,512,2048,8192"));
  const torch::Device device = options.device;
  const int reps = options.reps, warmup = options.warmup;
  const std::vector<std::int64_t>& tokens = options.tokens;
  torch::NoGradGuard outer;
  std::printf("%-10s %7s %12s %12s %10s %12s %12s %10s %12s\n", "matrix", "tokens", "bf16 ms", "int4 ms", "int4/bf16",
              "bf16 TF/s", "int4 TF/s", "dequant ms", "weight MB");
  const auto opts = torch::TensorOptions().device(device);
  for (const auto& [name, rows, cols] : std::vector<std::tuple<const char*, std::int64_t, std::int64_t>>{
           {"gate/up", 2048, 7168}, {"down", 7168, 2048}}) {
    torch::manual_seed(1);
    const torch::Tensor w = torch::randn({rows, cols}, opts.dtype(torch::kFloat)) * 0.02;
    const kp::runtime::Int4Weight q = kp::runtime::QuantizeInt4Weight(w);
    const torch::Tensor w_bf16 = kp::runtime::DequantizeInt4Weight(q, torch::kBFloat16);
    const double dequant =
        kp::bench::MedianSeconds(device, warmup, reps, [&] { kp::runtime::DequantizeInt4Weight(q, torch::kBFloat16); });
    for (std::int64_t t : tokens) {
      const torch::Tensor x = torch::randn({t, cols}, opts.dtype(torch::kBFloat16));
      const torch::Tensor dy = torch::randn({t, rows}, opts.dtype(torch::kBFloat16));
      auto step = [&](bool int4) {
        torch::AutoGradMode grad(true);
        const torch::Tensor xi = x.detach().requires_grad_(true);
        const torch::Tensor y = int4 ? kp::runtime::Int4Linear(xi, q) : torch::linear(xi, w_bf16);
        y.backward(dy);
      };
      const double bf16 = kp::bench::MedianSeconds(device, warmup, reps, [&] { step(false); });
      const double int4 = kp::bench::MedianSeconds(device, warmup, reps, [&] { step(true); });
      const double flops = 4.0 * t * rows * cols;  // forward and input gradient
      std::printf("%-10s %7lld %12.3f %12.3f %10.2f %12.1f %12.1f %10.3f %5.1f / %-5.1f\n", name,
                  static_cast<long long>(t), bf16 * 1e3, int4 * 1e3, int4 / bf16, flops / bf16 / 1e12,
                  flops / int4 / 1e12, dequant * 1e3, rows * cols * 2 / 1e6,
                  (q.packed.numel() * 4 + q.scales.numel() * 2) / 1e6);
    }
  }
  return kp::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  const kp::Status s = Run(argc, argv);
  if (s.ok()) return 0;
  std::cerr << "kimi-plan-int4-bench: " << s.message() << "\n";
  return 2;
}
