// The dependency graph of a pipeline schedule's actions. Two kinds of edge:
// program order (a rank issues its actions one after another, in list
// order) and data (F(s, m) after F(s - 1, m); the I or B of (s, m) after the
// I or B of (s + 1, m), and after F(s, m) on the last stage; W(s, m) after
// I(s, m); a SEND after the action producing its data; a RECV after the
// matching SEND). Where consecutive stages sit on different ranks, the data
// edge carries a transfer: through SEND/RECV when the schedule lists them,
// directly between the compute actions when it is compute-only.
//
// A schedule deadlocks exactly when this graph has a cycle; its longest
// weighted path is the step's makespan, which the discrete-event simulation
// (pipeline_sim.h) reproduces.
//
// Thread-safety: pure functions.
#ifndef KIMI_PLAN_SIMULATOR_SCHEDULE_GRAPH_H_
#define KIMI_PLAN_SIMULATOR_SCHEDULE_GRAPH_H_

#include <functional>
#include <vector>

#include "common/status.h"
#include "common/units.h"
#include "schedules/pipeline_schedule.h"

namespace kp {

/// One listed action with what it waits for.
struct ActionNode {
  PipelineAction action;
  int rank = 0;
  int cell = 0;  ///< position in its rank's list, idle slots counted
  /// The node whose completion this one needs besides its predecessor on
  /// the rank, or -1 (F of stage 0).
  int dep = -1;
  /// Whether `dep`'s data travels between ranks (a transfer time applies).
  bool transfer = false;
};

/// A schedule flattened rank by rank: rank r's actions, in list order, are
/// nodes[rank_begin[r]] .. nodes[rank_begin[r + 1] - 1]; idle slots have no node.
struct ActionIndex {
  std::vector<ActionNode> nodes;
  std::vector<int> rank_begin;
};

/// Validates the schedule (ValidateSchedule) and resolves every node's data
/// dependency.
Result<ActionIndex> IndexActions(const PipelineSchedule& schedule);

/// Time of one compute action (F, I, W or B); communication actions cost none.
using ActionCost = std::function<Nanoseconds(const PipelineAction&)>;
/// Time for the data of `microbatch` to move from stage `from_stage` to
/// `to_stage` (backward: an input gradient going to the previous stage).
using TransferCost = std::function<Nanoseconds(int from_stage, int to_stage, int microbatch, bool backward)>;

/// Ok when every rank can run its whole list; otherwise InvalidArgument
/// naming one cycle of waits, e.g. "deadlock: rank 0 waits at 0I1 for 1I1 on
/// rank 1, listed after 1F1 -> rank 1 waits at 1F1 for 0F1 on rank 0, listed
/// after 0I1 -> back to rank 0 at 0I1" ("listed after X": the awaited action
/// comes after X in its rank's list, and that rank is stuck at X).
Status CheckDeadlockFree(const PipelineSchedule& schedule);

struct ScheduledAction {
  int rank = 0;
  PipelineAction action;
};

struct CriticalPathResult {
  /// The longest path: compute times along it plus the transfers it crosses.
  Nanoseconds length{0};
  /// Its actions, first to last (communication actions included).
  std::vector<ScheduledAction> actions;
};

/// The longest weighted path through the dependency graph: node weights from
/// `cost`, transfer edges from `transfer`. Fails as CheckDeadlockFree does.
Result<CriticalPathResult> CriticalPath(const PipelineSchedule& schedule, const ActionCost& cost,
                                        const TransferCost& transfer);

}  // namespace kp

#endif  // KIMI_PLAN_SIMULATOR_SCHEDULE_GRAPH_H_
