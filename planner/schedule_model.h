// Closed forms of the pipeline schedules that the planner needs: how many
// micro-batches' activations a rank holds at its peak, and the bubble. The
// simulator's discrete-event runs of the same schedules are tested against
// these (simulator/, issue "Simulator").
#ifndef KIMI_PLAN_PLANNER_SCHEDULE_MODEL_H_
#define KIMI_PLAN_PLANNER_SCHEDULE_MODEL_H_

#include "common/units.h"
#include "specs/schedule_kind.h"

namespace kp {

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
/// exact cases). Communication is not included: CriticalHops says what the
/// stage-to-stage transfers add. Never negative.
Seconds BubbleTime(ScheduleKind kind, int pp, int vp, Seconds f, Seconds b, Seconds w,
                   OptimizerSync sync = OptimizerSync::kSynchronised);

/// How many transfer times C a step's transfers add to its makespan: the
/// simulated step with C minus the one without, over C (uniform costs, C
/// small against a chunk's work). Independent of F, B and W:
///   1f1b async: 2(p-2) + 2(M - ceil((M-1)/p)): the fill and drain, and in
///     the steady state a round trip to the next rank for most micro-batches
///     (a rank's backward waits for its successor's, which waited for this
///     rank's forward);
///   1f1b blocking: 2(p-1) + 2M - 3 (p >= 3; M + 1 at p = 2): every
///     micro-batch's two sends on the middle ranks;
///   interleaved async: 2(pv - 1), fill and drain only;
///   interleaved blocking: 2p - 3 + (2v - 1)M, an estimate (within 6% of
///     the simulated steps for p <= 8, v <= 3, M <= 4p);
///   others: 2(stages - 1) async; blocking adds 2 M per stage a rank holds.
/// simulator/pipeline_sim_test.cc holds each form to the simulation. Zero
/// without a pipeline.
double CriticalHops(ScheduleKind kind, int pp, int vp, int microbatches, SendMode mode);

}  // namespace kp

#endif  // KIMI_PLAN_PLANNER_SCHEDULE_MODEL_H_
