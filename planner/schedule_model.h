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
///   zb-h2: min(2(p - r) - 1, M); zbv: min(2p, 2M);
///   dualpipev: min(2p + 1, 2M) (DualPipe's table: PP + 1 chunks for PP = 2p stages).
/// The simulator's generated lists hold exactly these (simulator/pipeline_sim_test.cc).
int PeakInflightChunks(ScheduleKind kind, int pp, int vp, int microbatches, int rank);

/// The idle time a step costs each rank beyond its M (F + B + W) of work, with
/// no communication cost, where F, B and W are one micro-batch's forward,
/// input-backward and weight-backward through all the layers one rank holds.
/// `sync` says what a step is (OptimizerSync in specs/schedule_kind.h).
/// Synchronised, the step's makespan minus M (F + B + W):
///   gpipe, 1f1b: (p-1)(F+B+W); interleaved: (p-1)(F+B+W)/v;
///   zb-h1: (p-1)(F+B-W);
///   zb-h2: (p-1) max(F, F+B-2W);
///   zbv: (p-1) max(X-W, X/2), X = max(F, B);
///   dualpipev: (p-1) max(X-W/2, X/2), X = max(F, B).
/// With post-validation, the longest rank's span minus M (F + B + W), the
/// ZB paper's count (its bubble rate's "cost" is "the largest execution time
/// of all stages"): the same, except that the last rank's fill, (p-1)F or
/// (p-1)F/2 V-shaped, is no longer paid:
///   zb-h2: (p-1) max(0, F+B-2W), the paper's (p-1)(F+B-2W);
///   zbv: (p-1) max(0, X-W), zero at F = B = W as in the paper.
/// The simulated schedules match these forms exactly for W <= min(F, B)
/// (zb-h1, zb-h2), F <= B and W <= B (zbv), F = B and W <= B (dualpipev);
/// elsewhere they are estimates (simulator/pipeline_sim_test.cc pins the
/// exact cases). Communication is not included: the planner adds one hop per
/// stage boundary (chunk boundary when interleaved) in fill and drain, which
/// is what the simulator charges (2(p-1)C for zb-h2, 2(pv-1)C interleaved).
/// Never negative.
Seconds BubbleTime(ScheduleKind kind, int pp, int vp, Seconds f, Seconds b, Seconds w,
                   OptimizerSync sync = OptimizerSync::kSynchronised);

}  // namespace kp

#endif  // KIMI_PLAN_PLANNER_SCHEDULE_MODEL_H_
