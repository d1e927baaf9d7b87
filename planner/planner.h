// Evaluating one parallel plan: its split, memory per role, step time and
// verdict. The search (search.h) and the `plan` command are built on this.
#ifndef KIMI_PLAN_PLANNER_PLANNER_H_
#define KIMI_PLAN_PLANNER_PLANNER_H_

#include <string>
#include <vector>

#include "planner/memory_model.h"
#include "planner/plan_request.h"
#include "planner/step_time.h"
#include "specs/param_count.h"
#include "specs/stage_split.h"

namespace kp {

struct PlanEvaluation {
  ParallelPlan plan;
  LayerSplit layer_split;  ///< the rule that gave `split`; never kAuto
  StageSplit split;
  MemoryReport memory;
  StepTime step;
  /// Memory violations; empty when every role fits on every rank.
  std::vector<std::string> violations;
  bool feasible() const { return violations.empty(); }
};

/// The split `rule` (not kAuto) gives the plan's pp x stages-per-rank stages.
Result<StageSplit> PlanSplit(const PlanRequest& req, const ParallelPlan& plan, const LayerSplit& rule);

/// Evaluates a structurally valid plan (CheckPlan returned nothing) under
/// each split req.layer_split stands for (SplitCandidates) and keeps the
/// best: feasible first, then the most tokens/s, then the least actor memory.
/// `cache` (optional) remembers layer prices across the plans of a search.
Result<PlanEvaluation> EvaluatePlan(const PlanRequest& req, const ParallelPlan& plan, const ParamCount& params,
                                    StageCostCache* cache = nullptr);

/// Checks the request and the plan, then evaluates it. A structural
/// violation is an InvalidArgument naming the flag.
Result<PlanEvaluation> PlanFixed(const PlanRequest& req, const ParamCount& params);

}  // namespace kp

#endif  // KIMI_PLAN_PLANNER_PLANNER_H_
