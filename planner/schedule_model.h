// Closed forms of the pipeline schedules that the planner needs: how many
// micro-batches' activations a rank holds at its peak, and the bubble. The
// simulator's discrete-event runs of the same schedules are tested against
// these (simulator/, issue "Simulator").
#ifndef KIMI_PLAN_PLANNER_SCHEDULE_MODEL_H_
#define KIMI_PLAN_PLANNER_SCHEDULE_MODEL_H_

#include "common/units.h"
#include "specs/schedule_kind.h"

namespace kp {

/// Stages each rank holds under `kind`: vp for interleaved, 2 for the
/// V-shaped schedules, else 1.
int StagesPerRank(ScheduleKind kind, int vp);

/// Peak number of stage-chunks (one virtual stage's layers for one
/// micro-batch) whose activations rank `rank` holds at once.
///   gpipe: M v; 1f1b and zb-h1: min(p - r, M);
///   interleaved (Megatron's warm-up): min(2(p - r - 1) + (v - 1) p + 1, M v);
///   zb-h2: min(2(p - r) - 1, M); zbv: min(2p, 2M); dualpipev: min(2(p + 1), 2M).
int PeakInflightChunks(ScheduleKind kind, int pp, int vp, int microbatches, int rank);

/// The idle time of the critical rank with no communication cost, where F,
/// B and W are one micro-batch's forward, input-backward and
/// weight-backward through all the layers one rank holds:
///   gpipe, 1f1b: (p-1)(F+B+W); interleaved: (p-1)(F+B+W)/v;
///   zb-h1: (p-1)(F+B-W); zb-h2: (p-1)(F+B-2W);
///   zbv and dualpipev: (p-1)(F+B-2W)/2 (per-chunk times are half the rank's).
/// Never negative.
Seconds BubbleTime(ScheduleKind kind, int pp, int vp, Seconds f, Seconds b, Seconds w);

}  // namespace kp

#endif  // KIMI_PLAN_PLANNER_SCHEDULE_MODEL_H_
