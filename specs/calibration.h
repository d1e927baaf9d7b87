// A GPU's calibration table: what its matrix products and collectives
// achieve by shape and size, measured (`kimi-plan calibrate`) or derived from
// published measurements. The planner prices each GEMM and collective from it
// instead of one efficiency constant. File format: docs/presets.md
// ("Calibration tables"), schema "kimi-plan.calibration/1".
//
// Invariants after parsing: every GEMM grid is complete (every combination of
// its m, n and k values has a time) and every time is finite and positive.
// Thread-safety: immutable after parsing; lookups are const.
#ifndef KIMI_PLAN_SPECS_CALIBRATION_H_
#define KIMI_PLAN_SPECS_CALIBRATION_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/units.h"

namespace kp {

/// kBf16Grouped: one expert's share of a grouped product (PyTorch's
/// _grouped_mm over kGroupedGemmExperts experts, each m x k by k x n), the
/// time of the whole over the experts: what MoE layers run.
enum class GemmDtype { kBf16, kFp8, kBf16Grouped };
/// The experts a grouped grid's products were measured over.
constexpr int kGroupedGemmExperts = 8;
const char* GemmDtypeName(GemmDtype d);

/// One measured product C[m, n] = A[m, k] B[k, n].
struct GemmPoint {
  std::int64_t m = 0, n = 0, k = 0;
  Seconds time;
};

/// A complete grid of GEMM times for one dtype, looked up by interpolating
/// the achieved FLOP/s in log2(m), log2(n), log2(k).
class GemmGrid {
 public:
  /// Fails, naming `field`, if a time is not finite and positive, a size is
  /// below 1, or the grid misses a combination of its m, n and k values.
  static Result<GemmGrid> Build(std::vector<GemmPoint> points, const std::string& field);

  /// The time of one product of this shape. Inside the grid: trilinear in the
  /// logs of the sizes on the achieved FLOP/s. Above it: the edge's FLOP/s
  /// (large products saturate). Below it: the edge's time (small products
  /// are latency-bound: halving m does not halve the time).
  Seconds Time(double m, double n, double k) const;
  /// Achieved / `peak` for this shape.
  double Efficiency(double m, double n, double k, FlopsPerSecond peak) const;

  const std::vector<GemmPoint>& points() const { return points_; }
  const std::vector<std::int64_t>& ms() const { return ms_; }
  const std::vector<std::int64_t>& ns() const { return ns_; }
  const std::vector<std::int64_t>& ks() const { return ks_; }

 private:
  double FlopsPerSecondAt(size_t i, size_t j, size_t l) const;
  std::vector<GemmPoint> points_;
  std::vector<std::int64_t> ms_, ns_, ks_;
  std::vector<double> flops_per_s_;  ///< [i][j][l] flattened, m-major
};

enum class CollectiveOp { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kBroadcast, kSendRecv };
const char* CollectiveOpName(CollectiveOp op);
Result<CollectiveOp> ParseCollectiveOp(const std::string& name, const std::string& field);

/// Where a group's ranks sit: all inside one node (NVLink) or across nodes
/// (the scale-out fabric).
enum class LinkSpan { kNvlink, kFabric };
const char* LinkSpanName(LinkSpan s);

/// The bytes a collective's busiest link carries per byte of the buffer, for
/// n ranks, as nccl-tests defines bus bandwidth: all-reduce 2(n-1)/n,
/// all-gather, reduce-scatter and all-to-all (n-1)/n, broadcast and
/// send-recv 1. Time = factor x bytes / bus bandwidth.
double BusFactor(CollectiveOp op, int ranks);

/// One measured collective: `bytes` is the whole buffer (nccl-tests' "size").
struct CollectivePoint {
  Bytes bytes;
  Seconds time;
};

/// A collective's measured times over message sizes for one op, span and
/// group size.
struct CollectiveCurve {
  CollectiveOp op = CollectiveOp::kAllReduce;
  LinkSpan span = LinkSpan::kNvlink;
  int ranks = 2;
  std::string source;
  std::vector<CollectivePoint> points;  ///< sorted by bytes, sizes distinct
};

struct CalibrationTable {
  std::string gpu;
  std::string source;
  /// Device-to-device copy bandwidth, bytes read plus bytes written; 0 = not measured.
  BytesPerSecond memory_copy;
  /// The share of `memory_copy` a training step's memory-bound passes
  /// (norms, activation functions, softmax, dropout) reach, in (0, 1].
  double elementwise_share = 1.0;
  /// A decoder layer's fixed cost per pass (forward, and again backward)
  /// beyond its products and its bytes: kernel launches and the small
  /// kernels the byte count does not list; 0 = none.
  Seconds elementwise_layer_overhead{0};
  std::string elementwise_source;
  std::map<GemmDtype, GemmGrid> gemm;
  std::vector<CollectiveCurve> collectives;

  const GemmGrid* Gemm(GemmDtype d) const;
  /// The time of `op` over `ranks` ranks of `span` on a `bytes` buffer, from
  /// the curve of that op and span whose group size is nearest (bus bandwidth
  /// is what carries over between group sizes), interpolated log-log in the
  /// size and clamped at the ends; nullopt without a curve for op and span.
  std::optional<Seconds> CollectiveTime(CollectiveOp op, LinkSpan span, int ranks, Bytes bytes) const;
};

/// Parses and validates a table; errors name the field ("gemm.bf16: shape
/// m=512 n=128 k=4096 is missing ...", "collectives[2].points[0]: time must be
/// finite and > 0"). `origin` prefixes nothing; callers add the file or flag.
Result<CalibrationTable> ParseCalibration(const std::string& json_text);
/// The table in the file format: ParseCalibration(CalibrationToJson(t)) == t.
std::string CalibrationToJson(const CalibrationTable& t);

}  // namespace kp

#endif  // KIMI_PLAN_SPECS_CALIBRATION_H_
