#include "planner/planner.h"

#include <optional>

#include "planner/constraints.h"
#include "planner/schedule_model.h"

namespace kp {

Result<StageSplit> PlanSplit(const PlanRequest& req, const ParallelPlan& plan, const LayerSplit& rule) {
  return SplitLayers(rule, req.model.layers, plan.pp, StagesPerRank(req.schedule, plan.vp), req.model.mtp_layers);
}

namespace {

Result<PlanEvaluation> EvaluateWith(const PlanRequest& req, const ParallelPlan& plan, const ParamCount& params,
                                    const LayerSplit& rule, StageCostCache* cache) {
  PlanEvaluation e;
  e.plan = plan;
  e.layer_split = rule;
  KP_ASSIGN_OR_RETURN(e.split, PlanSplit(req, plan, rule));
  e.memory = EstimateMemory(req, plan, e.split, params);
  e.step = EstimateStepTime(req, plan, e.split, params, cache);
  e.violations = e.memory.violations;
  return e;
}

bool Better(const PlanEvaluation& a, const PlanEvaluation& b) {
  if (a.feasible() != b.feasible()) return a.feasible();
  if (a.step.tokens_per_s_per_gpu != b.step.tokens_per_s_per_gpu)
    return a.step.tokens_per_s_per_gpu > b.step.tokens_per_s_per_gpu;
  return a.memory.actor.total() < b.memory.actor.total();
}

}  // namespace

Result<PlanEvaluation> EvaluatePlan(const PlanRequest& req, const ParallelPlan& plan, const ParamCount& params,
                                    StageCostCache* cache) {
  std::optional<PlanEvaluation> best;
  Status first_error = Status::Ok();
  for (const LayerSplit& rule : SplitCandidates(req.layer_split, req.model.layers, req.model.mtp_layers, plan.pp,
                                                StagesPerRank(req.schedule, plan.vp))) {
    Result<PlanEvaluation> e = EvaluateWith(req, plan, params, rule, cache);
    if (!e.ok() && first_error.ok()) first_error = e.status();
    if (e.ok() && (!best || Better(*e, *best))) best = std::move(e).value();
  }
  if (!best) return first_error;
  return *std::move(best);
}

Result<PlanEvaluation> PlanFixed(const PlanRequest& req, const ParamCount& params) {
  if (Status s = ValidateRequest(req); !s.ok()) return Status::InvalidArgument(WithValueSource(req, s.message()));
  const std::vector<std::string> v = CheckPlan(req, req.plan);
  if (!v.empty()) return Status::InvalidArgument(WithValueSource(req, v.front()));
  return EvaluatePlan(req, req.plan, params);
}

}  // namespace kp
