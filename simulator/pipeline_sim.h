// Discrete-event execution of a pipeline schedule's per-rank action lists
// on the EventQueue: one compute Stream per rank; a rank issues its actions
// strictly in list order, one at a time; an action whose data is not there
// yet (a RECV before its transfer arrived, a compute action before its
// producer finished) blocks the rank until it is. A SEND costs its rank
// nothing and starts a transfer that lands after the transfer time.
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
#include "simulator/pipeline_schedule.h"
#include "simulator/schedule_graph.h"

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
};

struct TimelineEntry {
  int rank = 0;
  PipelineAction action;
  Nanoseconds start{0};
  Nanoseconds end{0};
};

struct PipelineSimResult {
  /// When the last action of any rank ends.
  Nanoseconds makespan{0};
  /// (makespan - M (f + b + w)) / makespan: each rank's share of idle time,
  /// as every rank computes M (f + b + w) in all.
  double bubble_fraction = 0;
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

}  // namespace kp

#endif  // KIMI_PLAN_SIMULATOR_PIPELINE_SIM_H_
