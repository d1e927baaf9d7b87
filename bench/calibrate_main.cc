// kimi-plan-calibrate: `kimi-plan calibrate` for a GPU machine that has
// LibTorch and little else (the runtime-only tree: no Boost, no SQLite).
// Measures the calibration table (runtime/calibrate.h) and writes it; then,
// with --shape, measures the exact products of that model's layers at the
// given tokens and prints how far the table's interpolation is from each.
//
//   kimi-plan-calibrate --out FILE [--gpu-name h200] [--shape MODEL.json --tokens N] [--no-fp8]
//
// Output: progress lines, then `RESULT key=value ...`. Exit 2 on bad
// arguments (or no GPU), 1 on a LibTorch error.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <tuple>

#include "bench/bench_util.h"
#include "planner/layer_ops.h"
#include "runtime/train/calibrate.h"
#include "specs/presets.h"

namespace kp {
namespace {

struct Args {
  std::string out, gpu = "h200", shape;
  double tokens = 8192;
  bool fp8 = true;
};

Result<Args> ParseArgs(int argc, char** argv) {
  bool no_fp8 = false;
  KP_ASSIGN_OR_RETURN(auto kv, bench::OptionPairs(argc, argv, "no-fp8", &no_fp8));
  Args a;
  a.fp8 = !no_fp8;
  for (const auto& [k, v] : kv) {
    if (k == "tokens") {
      KP_ASSIGN_OR_RETURN(a.tokens, bench::NumberOption(k, v, 1, 1e9));
      continue;
    }
    if (k == "out") a.out = v;
    else if (k == "gpu-name") a.gpu = v;
    else if (k == "shape") a.shape = v;
    else return Status::InvalidArgument("--" + k + ": unknown option");
  }
  if (a.out.empty()) return Status::InvalidArgument("--out: name the table file to write");
  return a;
}

// The table's interpolation against a direct measurement of each distinct
// product shape of the model's layers (tp 1, `tokens` per micro-batch).
void CheckShapes(const Args& a, const CalibrationTable& t, const CalibrateOptions& o) {
  std::ifstream in(a.shape);
  std::stringstream text;
  text << in.rdbuf();
  Result<ModelSpec> m = ParseModelSpec(text.str());
  if (!m.ok()) {
    std::cerr << "--shape: " << m.status().message() << "\n";
    return;
  }
  PlanRequest req;
  req.model = *m;
  req.prompt_length = static_cast<int>(a.tokens);
  req.response_length = 0;
  req.flash_attention = true;
  std::set<std::tuple<long, long, long>> shapes;
  for (int l = 0; l < m->layers; ++l)
    for (const GemmOp& g : DecoderLayerOps(req, req.plan, l, 1.0).gemms)
      if (g.weight) {
        shapes.insert({long(g.m), long(g.n), long(g.k)});  // forward
        shapes.insert({long(g.m), long(g.k), long(g.n)});  // data gradient
        shapes.insert({long(g.k), long(g.n), long(g.m)});  // weight gradient
      }
  double sum = 0, worst = 0;
  int n = 0;
  for (const auto& [mm, nn, kk] : shapes) {
    Result<Seconds> measured = MeasureGemm(mm, nn, kk, GemmDtype::kBf16, o);
    if (!measured.ok()) continue;
    const double table = t.Gemm(GemmDtype::kBf16)->Time(mm, nn, kk).value();
    const double err = table / measured->value() - 1;
    std::printf("shape m=%ld n=%ld k=%ld: measured %.1f us (%.0f TFLOP/s), table %.1f us, error %+.1f%%\n", mm, nn,
                kk, measured->value() * 1e6, 2.0 * mm * nn * kk / measured->value() / 1e12, table * 1e6, err * 100);
    sum += std::abs(err);
    worst = std::max(worst, std::abs(err));
    ++n;
  }
  std::printf("RESULT check=shapes shapes=%d mean_abs_error=%.4f max_abs_error=%.4f\n", n, n ? sum / n : 0.0, worst);
}

int Run(const Args& a) {
  CalibrateOptions o;
  o.gpu = a.gpu;
  o.fp8 = a.fp8;
  Result<CalibrationTable> t = MeasureCalibration(o, [](const std::string& line) { std::cerr << line << "\n"; });
  if (!t.ok()) {
    std::cerr << t.status().message() << "\n";
    return 2;
  }
  std::ofstream(a.out) << CalibrationToJson(*t) << "\n";
  const GemmGrid& g = *t->Gemm(GemmDtype::kBf16);
  std::printf("RESULT table=%s shapes=%zu fp8=%d copy_gbytes_per_s=%.1f bf16_8192_tflops=%.1f\n", a.out.c_str(),
              g.points().size(), t->Gemm(GemmDtype::kFp8) ? 1 : 0, t->memory_copy.value() / 1e9,
              2.0 * 8192 * 8192 * 8192 / g.Time(8192, 8192, 8192).value() / 1e12);
  if (!a.shape.empty()) CheckShapes(a, *t, o);
  return 0;
}

}  // namespace
}  // namespace kp

int main(int argc, char** argv) {
  return kp::bench::BenchMain<kp::Args>(kp::ParseArgs(argc, argv), "kimi-plan-calibrate: ", kp::Run);
}
