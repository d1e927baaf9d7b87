#include "planner/schedule_model.h"

#include <algorithm>

namespace kp {

int StagesPerRank(ScheduleKind kind, int vp) {
  if (ScheduleTakesVp(kind)) return vp;
  if (ScheduleIsVShaped(kind)) return 2;
  return 1;
}

int PeakInflightChunks(ScheduleKind kind, int p, int v, int m, int r) {
  switch (kind) {
    case ScheduleKind::kGpipe: return m * StagesPerRank(kind, v);
    case ScheduleKind::k1F1B:
    case ScheduleKind::kZbH1: return std::min(p - r, m);
    case ScheduleKind::kInterleaved1F1B: return std::min(2 * (p - r - 1) + (v - 1) * p + 1, m * v);
    case ScheduleKind::kZbH2: return std::min(2 * (p - r) - 1, m);
    case ScheduleKind::kZbv: return std::min(2 * p, 2 * m);
    case ScheduleKind::kDualPipeV: return std::min(2 * p + 1, 2 * m);
  }
  return m;
}

Seconds BubbleTime(ScheduleKind kind, int p, int v, Seconds f, Seconds b, Seconds w, OptimizerSync sync) {
  const double steps = p - 1;
  const bool post = sync == OptimizerSync::kPostValidation;
  double t = 0;
  switch (kind) {
    case ScheduleKind::kGpipe:
    case ScheduleKind::k1F1B: t = steps * (f + b + w).value(); break;
    case ScheduleKind::kInterleaved1F1B: t = steps * (f + b + w).value() / v; break;
    case ScheduleKind::kZbH1: t = steps * (f + b - w).value(); break;
    // A synchronised step pays the last rank's fill, which bounds the
    // schedules that hide W in the bubbles; post-validation does not.
    case ScheduleKind::kZbH2: t = steps * std::max(post ? 0.0 : f.value(), (f + b - w - w).value()); break;
    case ScheduleKind::kZbv: {
      const double x = std::max(f.value(), b.value());
      t = steps * std::max(x - w.value(), post ? 0.0 : x / 2);
      break;
    }
    case ScheduleKind::kDualPipeV: {
      const double x = std::max(f.value(), b.value());
      t = steps * std::max(x - w.value() / 2, x / 2);
      break;
    }
  }
  return Seconds(std::max(0.0, t));
}

}  // namespace kp
