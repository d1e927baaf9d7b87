#include "runtime/train/calibrate.h"

#include <algorithm>
#include <sstream>

#include <torch/torch.h>
#include <torch/version.h>

#include "common/clock.h"

namespace kp {

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Median seconds of one call of `op`: a warm-up, a probe that sizes the
// batches, then `batches` batches of back-to-back calls between device
// synchronisations.
double TimeCalls(const std::function<void()>& op, const CalibrateOptions& o) {
  op();
  op();
  torch::cuda::synchronize();
  Stopwatch probe;
  op();
  torch::cuda::synchronize();
  const double one = std::max(probe.Seconds(), 1e-7);
  const int reps = std::max(1, static_cast<int>(o.min_batch_s / one));
  std::vector<double> per_call;
  for (int b = 0; b < o.batches; ++b) {
    torch::cuda::synchronize();
    Stopwatch w;
    for (int r = 0; r < reps; ++r) op();
    torch::cuda::synchronize();
    per_call.push_back(w.Seconds() / reps);
  }
  return Median(per_call);
}

}  // namespace

Status CheckCalibrationDevice() {
  if (!torch::cuda::is_available())
    return Status::InvalidArgument(
        "needs a CUDA GPU and LibTorch built with CUDA; this machine has none (run it on the GPU whose "
        "table you want, or use a table from presets/calibration/)");
  return Status::Ok();
}

namespace {

#if defined(TORCH_VERSION_MAJOR) && TORCH_VERSION_MAJOR >= 2
constexpr bool kHaveScaledMm = true;
#else
constexpr bool kHaveScaledMm = false;
#endif

// A product of the given shape, ready to be called repeatedly: fp8 operands
// are e4m3 with per-tensor scales and a bf16 output (the FP8 recipe's GEMM);
// B is column-major as cuBLASLt's fp8 path requires.
std::function<void()> MakeGemm(std::int64_t m, std::int64_t n, std::int64_t k, GemmDtype dtype) {
  const auto dev = torch::Device(torch::kCUDA, 0);
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(dev);
  auto a = torch::randn({m, k}, bf16);
  if (dtype == GemmDtype::kBf16) {
    auto b = torch::randn({k, n}, bf16);
    auto c = torch::empty({m, n}, bf16);
    return [a, b, c]() mutable { torch::mm_out(c, a, b); };
  }
#if defined(TORCH_VERSION_MAJOR) && TORCH_VERSION_MAJOR >= 2
  auto a8 = a.to(torch::kFloat8_e4m3fn);
  auto b8 = torch::randn({n, k}, bf16).to(torch::kFloat8_e4m3fn).t();
  auto one = torch::ones({}, torch::TensorOptions().dtype(torch::kFloat32).device(dev));
  return [a8, b8, one]() { at::_scaled_mm(a8, b8, one, one, std::nullopt, std::nullopt, torch::kBFloat16); };
#else
  return nullptr;
#endif
}

#if defined(TORCH_VERSION_MAJOR) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8))
constexpr bool kHaveGroupedMm = true;
#else
constexpr bool kHaveGroupedMm = false;
#endif

// kGroupedGemmExperts experts' products in one grouped call, each m x k by
// k x n in bf16, the experts' weights column-major as MoE layers pass them
// (w[e, n, k] transposed); nullptr without _grouped_mm.
std::function<void()> MakeGroupedGemm(std::int64_t m, std::int64_t n, std::int64_t k) {
#if defined(TORCH_VERSION_MAJOR) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8))
  const auto dev = torch::Device(torch::kCUDA, 0);
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(dev);
  const std::int64_t g = kGroupedGemmExperts;
  auto a = torch::randn({g * m, k}, bf16);
  auto b = torch::randn({g, n, k}, bf16).transpose(-2, -1);
  auto offs = torch::arange(1, g + 1, torch::TensorOptions().dtype(torch::kInt32).device(dev)) * m;
  offs = offs.to(torch::kInt32);
  return [a, b, offs]() { at::_grouped_mm(a, b, offs); };
#else
  return nullptr;
#endif
}

double MeasureCopyBandwidth(const CalibrateOptions& o) {
  const std::int64_t bytes = std::int64_t(2) << 30;
  const auto opts = torch::TensorOptions().dtype(torch::kUInt8).device(torch::Device(torch::kCUDA, 0));
  auto src = torch::randint(0, 255, {bytes}, opts), dst = torch::empty({bytes}, opts);
  const double t = TimeCalls([&] { dst.copy_(src); }, o);
  return 2.0 * double(bytes) / t;  // bytes read plus bytes written
}

std::string Shape(std::int64_t m, std::int64_t n, std::int64_t k) {
  std::ostringstream s;
  s << "m=" << m << " n=" << n << " k=" << k;
  return s.str();
}

}  // namespace

Result<Seconds> MeasureGemm(std::int64_t m, std::int64_t n, std::int64_t k, GemmDtype dtype,
                            const CalibrateOptions& options) {
  KP_RETURN_IF_ERROR(CheckCalibrationDevice());
  torch::NoGradGuard no_grad;
  auto op = MakeGemm(m, n, k, dtype);
  if (!op) return Status::InvalidArgument("calibrate: this LibTorch has no fp8 product (_scaled_mm)");
  return Seconds(TimeCalls(op, options));
}

Result<CalibrationTable> MeasureCalibration(const CalibrateOptions& o, const CalibrateProgress& progress) {
  KP_RETURN_IF_ERROR(CheckCalibrationDevice());
  torch::NoGradGuard no_grad;
  CalibrationTable t;
  t.gpu = o.gpu;
  std::ostringstream src;
  src << "measured by kimi-plan calibrate on " << torch::cuda::device_count() << " visible CUDA device(s), LibTorch "
#ifdef TORCH_VERSION
      << TORCH_VERSION
#endif
      << "; median of " << o.batches << " batches of >= " << o.min_batch_s * 1e3 << " ms per shape";
  t.source = src.str();
  t.memory_copy = BytesPerSecond(MeasureCopyBandwidth(o));
  progress("device-to-device copy: " + std::to_string(t.memory_copy.value() / 1e9) + " GB/s (read + write)");
  std::vector<GemmDtype> dtypes = {GemmDtype::kBf16};
  if (o.fp8 && kHaveScaledMm) dtypes.push_back(GemmDtype::kFp8);
  const size_t total = dtypes.size() * o.ms.size() * o.ns.size() * o.ks.size();
  size_t done = 0;
  for (GemmDtype d : dtypes) {
    std::vector<GemmPoint> points;
    for (auto m : o.ms)
      for (auto n : o.ns)
        for (auto k : o.ks) {
          auto op = MakeGemm(m, n, k, d);
          const double s = TimeCalls(op, o);
          points.push_back({m, n, k, Seconds(s)});
          ++done;
          if (done % 32 == 0 || done == total) {
            std::ostringstream line;
            line << "[" << done << "/" << total << "] " << GemmDtypeName(d) << " " << Shape(m, n, k) << ": "
                 << 2.0 * m * n * k / s / 1e12 << " TFLOP/s";
            progress(line.str());
          }
        }
    KP_ASSIGN_OR_RETURN(GemmGrid g, GemmGrid::Build(std::move(points), std::string("gemm.") + GemmDtypeName(d)));
    t.gemm.emplace(d, std::move(g));
  }
  if (o.grouped && kHaveGroupedMm) {
    std::vector<GemmPoint> points;
    for (auto m : o.grouped_ms)
      for (auto n : o.grouped_ns)
        for (auto k : o.grouped_ks) {
          // One expert's share: the grouped call's time over its experts.
          const double s = TimeCalls(MakeGroupedGemm(m, n, k), o) / kGroupedGemmExperts;
          points.push_back({m, n, k, Seconds(s)});
        }
    progress("bf16 grouped products: " + std::to_string(points.size()) + " shapes of " +
             std::to_string(kGroupedGemmExperts) + " experts");
    KP_ASSIGN_OR_RETURN(GemmGrid g, GemmGrid::Build(std::move(points), "gemm.bf16-grouped"));
    t.gemm.emplace(GemmDtype::kBf16Grouped, std::move(g));
  }
  return t;
}

}  // namespace kp
