// Measures a GPU's calibration table (specs/calibration.h): the time of bf16
// and fp8 matrix products over a grid of shapes, and the device-to-device copy
// bandwidth. `kimi-plan calibrate` and `kimi-plan-calibrate` (the runtime-only
// tree, for a GPU machine without Boost or SQLite) both call this.
//
// Each product is timed as the median over several batches of back-to-back
// launches, each batch long enough (>= `min_batch`) that the host's
// synchronisation is noise; the device is synchronised around every batch.
#ifndef KIMI_PLAN_RUNTIME_TRAIN_CALIBRATE_H_
#define KIMI_PLAN_RUNTIME_TRAIN_CALIBRATE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "specs/calibration.h"

namespace kp {

struct CalibrateOptions {
  std::string gpu = "h200";  ///< the name the table is written under
  /// The grid: every combination is measured (docs/presets.md).
  std::vector<std::int64_t> ms = {128, 256, 512, 1024, 2048, 4096, 8192, 16384};
  std::vector<std::int64_t> ns = {128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
  std::vector<std::int64_t> ks = {128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
  bool fp8 = true;           ///< also fp8 (e4m3, per-tensor scales) where LibTorch has _scaled_mm
  /// Also bf16 grouped products (kGroupedGemmExperts experts of m tokens
  /// each) where LibTorch has _grouped_mm (2.8 on), over these sizes.
  bool grouped = true;
  std::vector<std::int64_t> grouped_ms = {32, 64, 128, 256, 512, 1024, 2048, 4096};
  std::vector<std::int64_t> grouped_ns = {256, 512, 1024, 2048, 4096, 8192};
  std::vector<std::int64_t> grouped_ks = {256, 512, 1024, 2048, 4096, 8192};
  int batches = 5;           ///< timed batches per shape; the median is kept
  double min_batch_s = 2e-3; ///< each batch runs at least this long
};

/// One line of progress: the shape just measured and how far along.
using CalibrateProgress = std::function<void(const std::string& line)>;

/// InvalidArgument, saying what is needed, unless LibTorch sees a CUDA device.
Status CheckCalibrationDevice();

/// Fails as CheckCalibrationDevice does; otherwise measures the grid on cuda:0.
Result<CalibrationTable> MeasureCalibration(const CalibrateOptions& options, const CalibrateProgress& progress);

/// The median time of one product of this shape (used by the benchmarks to
/// check the table's interpolation on a model's exact shapes).
Result<Seconds> MeasureGemm(std::int64_t m, std::int64_t n, std::int64_t k, GemmDtype dtype,
                            const CalibrateOptions& options);

}  // namespace kp

#endif  // KIMI_PLAN_RUNTIME_TRAIN_CALIBRATE_H_
