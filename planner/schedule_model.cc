#include "planner/schedule_model.h"

#include <algorithm>
#include <cmath>

namespace kp {

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

double CriticalHops(ScheduleKind kind, int pp, int vp, int microbatches, SendMode mode) {
  if (pp < 2) return 0;
  const double p = pp, m = microbatches;
  const int spr = StagesPerRank(kind, vp);
  const double stages = p * spr;
  const bool blocking = mode == SendMode::kBlocking;
  switch (kind) {
    case ScheduleKind::k1F1B:
      if (!blocking) return 2 * (p - 2) + 2 * (m - std::ceil((m - 1) / p));
      return pp == 2 ? m + 1 : 2 * (p - 1) + 2 * m - 3;
    case ScheduleKind::kInterleaved1F1B:
      return blocking ? 2 * p - 3 + (2.0 * spr - 1) * m : 2 * (stages - 1);
    default:
      return 2 * (stages - 1) + (blocking ? 2.0 * spr * m : 0.0);
  }
}

}  // namespace kp
