// Enumerating every structurally valid plan for a cluster and ranking the
// feasible ones by predicted throughput; and, for a verdict, the nearest
// plan that fits (on the same cluster, else on the fewest more nodes).
#ifndef KIMI_PLAN_PLANNER_SEARCH_H_
#define KIMI_PLAN_PLANNER_SEARCH_H_

#include <optional>
#include <string>
#include <vector>

#include "planner/planner.h"

namespace kp {

struct SearchResult {
  std::vector<PlanEvaluation> best;  ///< feasible plans, fastest first, at most req.top
  long long evaluated = 0;           ///< structurally valid plans evaluated
  long long feasible = 0;
  double seconds = 0;
};

/// The actor layouts to try on req's cluster: every (tp, cp, pp, vp, ep, etp)
/// with dp derived, each passing CheckPlan. The rollout layout is chosen once
/// (ChooseRollout) since it does not depend on the actor's.
std::vector<ParallelPlan> EnumeratePlans(const PlanRequest& req);

/// The rollout engine with the fewest GPUs whose weights and one sequence's
/// KV fit, preferring tensor over data parallelism; nullopt when none fits.
std::optional<ParallelPlan> ChooseRollout(const PlanRequest& req, const ParamCount& pc);
/// Every engine ChooseRollout considers that fits in req's placement, up to
/// `max_gpus` GPUs, in its order of preference: ChooseRollout of a pool is
/// the first of them whose size divides the pool.
std::vector<ParallelPlan> FittingRollouts(const PlanRequest& req, const ParamCount& pc, std::int64_t max_gpus);

/// `cache` (optional) remembers layer prices; one cache may serve requests
/// that differ only in their cluster's size (FindNearestFit's).
SearchResult SearchPlans(const PlanRequest& req, const ParamCount& pc, StageCostCache* cache = nullptr);

struct NearestFit {
  int nodes = 0;                 ///< the cluster size it needs
  std::string changes;           ///< option changes it needs, e.g. "--recompute full"; empty if none
  PlanEvaluation evaluation;
};
/// The fastest feasible plan on the smallest cluster among 1x, 1.25x .. 8x
/// the nodes; on each size it tries the request as given, then with full
/// recomputation, then (LoRA) with the frozen base in its storage format.
/// nullopt if nothing up to 8x fits.
std::optional<NearestFit> FindNearestFit(const PlanRequest& req, const ParamCount& pc);

}  // namespace kp

#endif  // KIMI_PLAN_PLANNER_SEARCH_H_
