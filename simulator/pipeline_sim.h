// Discrete-event execution of a pipeline schedule's per-rank action lists
// on the EventQueue: one compute Stream per rank; a rank issues its actions
// strictly in list order, one at a time; an action whose data is not there
// yet (a RECV before its transfer arrived, a compute action before its
// producer finished) blocks the rank until it is. An async SEND costs its
// rank nothing and starts a transfer that lands after the transfer time; a
// blocking SEND holds its rank for the transfer time.
// Compute-only schedules are lowered with AddCommunication first, so what
// runs is exactly the list a runtime would execute.
//
// Thread-safety: pure function of its inputs (a fresh queue per call).
#ifndef KIMI_PLAN_SIMULATOR_PIPELINE_SIM_H_
#define KIMI_PLAN_SIMULATOR_PIPELINE_SIM_H_

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "common/units.h"
#include "schedules/pipeline_schedule.h"
#include "simulator/schedule_graph.h"
#include "specs/schedule_kind.h"

namespace kp {

/// One micro-batch's forward (f), input-gradient backward (b) and
/// weight-gradient backward (w) through ALL the layers one rank holds, and
/// one stage-to-stage transfer (p2p). A rank with k stages spends f / k per
/// stage's F, b / k per I, w / k per W and (b + w) / k per full B (integer
/// nanoseconds, rounded down).
struct StageCosts {
  Nanoseconds f{0};
  Nanoseconds b{0};
  Nanoseconds w{0};
  Nanoseconds p2p{0};
};

struct PipelineSimOptions {
  /// Overrides p2p per hop when set, e.g. with the bytes each hop carries.
  TransferCost transfer;
  /// Whether to fill PipelineSimResult::timeline.
  bool record_timeline = true;
  /// How the step meets the next one at the optimizer step, which decides
  /// what PipelineSimResult::step counts (DefaultOptimizerSync gives the one
  /// a schedule's authors use).
  OptimizerSync optimizer_sync = OptimizerSync::kSynchronised;
  /// Async: a SEND costs its rank nothing. Blocking: the SEND holds its rank
  /// for the transfer time (SendMode in specs/schedule_kind.h).
  SendMode send_mode = SendMode::kAsync;
};

struct TimelineEntry {
  int rank = 0;
  PipelineAction action;
  Nanoseconds start{0};
  Nanoseconds end{0};
};

struct PipelineSimResult {
  /// When the last action of any rank ends (every rank starts at 0).
  Nanoseconds makespan{0};
  /// The accounting `step` and `bubble_fraction` use (the options').
  OptimizerSync optimizer_sync = OptimizerSync::kSynchronised;
  /// What one step costs in steady state: the makespan when synchronised;
  /// with post-validation the longest span_per_rank, which is the period of
  /// steps run back to back without the barrier (SimulateBackToBackSteps;
  /// pipeline_sim_test.cc checks the two agree for every generated schedule).
  Nanoseconds step{0};
  /// (step - M (f + b + w)) / step: each rank's share of idle time in a
  /// step, as every rank computes M (f + b + w) in all.
  double bubble_fraction = 0;
  /// Per rank, its last action's end minus its first action's start.
  std::vector<Nanoseconds> span_per_rank;
  /// makespan - the rank's compute time.
  std::vector<Nanoseconds> idle_per_rank;
  /// Idle time between the rank's first action and its last one: the bubble
  /// as the zero-bubble papers count it (a rank that starts late or ends
  /// early because of the pipeline's stagger is not idle in between), which
  /// is what a step costs when consecutive steps may overlap.
  std::vector<Nanoseconds> span_idle_per_rank;
  /// Per rank, the most (stage, micro-batch) chunks whose F has run and
  /// whose I or B has not: activations held at the peak. With one stage per
  /// rank these are micro-batches; compare PeakInflightChunks.
  std::vector<int> peak_inflight;
  /// Events the queue processed.
  std::uint64_t events = 0;
  /// The compute actions (F, I, W, B) in the order they finished.
  std::vector<TimelineEntry> timeline;
};

/// The per-action compute times StageCosts implies for `schedule`'s stages
/// per rank (the ActionCost CriticalPath takes).
ActionCost CostsPerAction(const StageCosts& costs, int stages_per_rank);

/// Runs one step of `schedule`. Errors: an invalid schedule (ValidateSchedule),
/// negative costs ("--f-us: must be >= 0"), or a deadlock (named as
/// CheckDeadlockFree names it).
Result<PipelineSimResult> SimulatePipeline(const PipelineSchedule& schedule, const StageCosts& costs,
                                           const PipelineSimOptions& options = {});

/// Runs `steps` (>= 1) steps of `schedule` back to back with the
/// optimizer-step synchronisation bypassed (OptimizerSync::kPostValidation):
/// each rank's list repeated `steps` times, step k's micro-batches numbered
/// k M .. (k + 1) M - 1, so a rank starts step k + 1 as soon as it has
/// finished its own step k and the only waits across steps are those the
/// data imposes (the optimizer step itself costs nothing here). Returns, per
/// step, when its last action on any rank ends; the differences of
/// consecutive ends are the steady-state period. The transfer hook, if any,
/// sees micro-batches numbered within their step. options.optimizer_sync and
/// record_timeline are ignored. Errors: as SimulatePipeline, and
/// "--steps: must be >= 1".
Result<std::vector<Nanoseconds>> SimulateBackToBackSteps(const PipelineSchedule& schedule, const StageCosts& costs,
                                                         int steps, const PipelineSimOptions& options = {});

}  // namespace kp

#endif  // KIMI_PLAN_SIMULATOR_PIPELINE_SIM_H_
