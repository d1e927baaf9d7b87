// The search over every setting a user can change for a fixed model, cluster
// and workload: the parallel layout, the micro-batch size, recompute (none,
// selective, full, and Megatron's block and uniform methods with every layer
// count a chunk can use), the pipeline schedule (and vp), the layer-split
// rule, the placement (colocated, or split with every rollout pool size a
// rollout engine can tile) and the rollout engine's layout.
// Cheap structural checks run first; a memory ceiling per layout and
// step-time floors per layout, micro-batch size and recompute setting prune
// what no result can use. With `prune` off the same space is priced point
// by point (the brute force the tests hold the pruned search to).
#ifndef KIMI_PLAN_PLANNER_SPACE_SEARCH_H_
#define KIMI_PLAN_PLANNER_SPACE_SEARCH_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "planner/planner.h"

namespace kp {

/// The settings of a plan beyond its parallel sizes and split rule.
struct PlanKnobs {
  ScheduleKind schedule = ScheduleKind::k1F1B;
  int micro_batch = 1;
  Recompute recompute = Recompute::kSelective;
  RecomputeMethod recompute_method = RecomputeMethod::kUniform;  ///< full only
  int recompute_layers = 1;                                      ///< full only
  Placement placement = Placement::kColocated;
  int rollout_gpus = 0;  ///< split placement: the rollout pool
  Dispatcher dispatcher = Dispatcher::kAllToAll;  ///< MoE: the token dispatcher
  bool a2a_overlap = false;                       ///< MoE: the expert exchange overlapped
  bool operator==(const PlanKnobs&) const = default;
};

/// One way the MoE layers exchange tokens: a dispatcher, with the exchange
/// overlapped with the other micro-batch or not.
struct ExchangeChoice {
  Dispatcher dispatcher = Dispatcher::kAllToAll;
  bool a2a_overlap = false;
  bool operator==(const ExchangeChoice&) const = default;
};

/// The exchanges a search tries on req's model: for an MoE model each of
/// `dispatchers` (empty: alltoall and the flex dispatcher made for the
/// system, hybridep in an NVLink domain wider than a node, deepep
/// elsewhere; the two are priced alike) with each of
/// `overlaps` (empty: off and on), overlap on only where Megatron allows it
/// for the model (at most one MTP layer; CheckPlan rules on the layout);
/// for a dense model only req's own.
std::vector<ExchangeChoice> ExchangeChoices(const PlanRequest& req, const std::vector<Dispatcher>& dispatchers = {},
                                            const std::vector<bool>& overlaps = {});

/// The knobs `req` sets.
PlanKnobs KnobsOf(const PlanRequest& req);
/// `base` with the knobs, the plan and the split rule set: the request the
/// candidate's evaluation answers (EvaluatePlan of it gives the same).
PlanRequest ApplyKnobs(const PlanRequest& base, const PlanKnobs& knobs, const ParallelPlan& plan,
                       const LayerSplit& split);

/// A feasible point of the space, priced.
struct SpaceCandidate {
  PlanKnobs knobs;
  PlanEvaluation evaluation;
  std::int64_t actor_gpus = 0;
  /// GPU memory left on the actor's GPUs at their peak: colocated, the
  /// largest phase peak; split, actor plus reference.
  Bytes headroom;
  Seconds step_time() const { return evaluation.step.total; }
};

struct SpaceOptions {
  /// The schedules tried; empty: 1f1b, interleaved-1f1b (vp 2 to 6 and 8,
  /// and every vp that divides the layers, or the layers plus embedding and
  /// head, into equal stages), zb-h1, zb-h2, zbv and dualpipev. Without a pipeline (pp 1)
  /// only 1f1b: the schedule changes nothing there.
  std::vector<ScheduleKind> schedules;
  /// The layer-split rules tried; empty: even and megatron.
  std::vector<LayerSplit> splits;
  /// MoE models: the dispatchers and overlaps tried (ExchangeChoices);
  /// empty: all of them.
  std::vector<Dispatcher> dispatchers;
  std::vector<bool> a2a_overlaps;
  /// false: every point is checked with CheckPlan and priced (brute force).
  bool prune = true;
  /// Called after each placement with the share of the space searched (0..1).
  std::function<void(double share)> progress;
  /// Called with every feasible plan priced (with `prune` off: every
  /// feasible plan of the space); may be null.
  std::function<void(const SpaceCandidate&)> each_feasible;
};

/// Where every point of the space went; considered = pruned_constraints +
/// pruned_memory + pruned_time + evaluated.
struct SpaceCounts {
  long long considered = 0;
  long long pruned_constraints = 0;  ///< broke a structural rule (CheckPlan's), found before pricing
  long long pruned_memory = 0;       ///< no setting of the layout fits (HeadroomCeiling < 0), or no rollout engine does
  long long pruned_time = 0;         ///< a step-time floor no result (top, either front) can use
  long long evaluated = 0;           ///< priced by the memory and step-time models
  long long feasible = 0;
};

struct SpaceSearchResult {
  /// Feasible plans, fastest first (ties: fewer actor GPUs, more headroom,
  /// then the settings in a fixed order), at most req.top.
  std::vector<SpaceCandidate> top;
  /// Pareto front of step time against actor GPUs: no other feasible plan
  /// is as fast on as few GPUs and better in one. Fewest GPUs first.
  std::vector<SpaceCandidate> front_gpus;
  /// Pareto front of step time against headroom, fastest first.
  std::vector<SpaceCandidate> front_headroom;
  SpaceCounts counts;
  double seconds = 0;
};

/// Searches req's whole space (req.plan, schedule, micro_batch, recompute
/// and its method and layers, placement, rollout_gpus, layer_split and, for
/// an MoE model, the dispatcher and overlap are ignored; the rollout engine
/// of each placement is ChooseRollout's). Per
/// layout the recompute settings are none, selective, full, block N for N
/// from 1 to its largest chunk's layers - 1 and uniform N for N from 2 to
/// them (block N beyond recomputes what full does; uniform N beyond keeps
/// what uniform at the chunk's size keeps). Each exchange of
/// ExchangeChoices is a space of its own, searched into one set of results
/// (the floors of each priced under its exchange). Results depend only on the
/// space, never on `prune`; only the counts do.
SpaceSearchResult SearchSpace(const PlanRequest& req, const ParamCount& pc, const SpaceOptions& options = {});

/// GPU memory left on the actor's GPUs at their peak (SpaceCandidate::headroom).
Bytes MemoryHeadroom(const PlanRequest& req, const MemoryReport& memory);

/// The rollout pools the split placement tries on req's cluster: every size
/// from 1 to the cluster less one GPU that some rollout engine fitting the
/// split placement tiles (FittingRollouts; so every multiple of the smallest
/// engine's GPUs, and of any larger one's), ascending.
std::vector<int> RolloutPoolSizes(const PlanRequest& req, const ParamCount& pc);

}  // namespace kp

#endif  // KIMI_PLAN_PLANNER_SPACE_SEARCH_H_
