#include "planner/planner.h"

#include "planner/constraints.h"
#include "planner/schedule_model.h"

namespace kp {

Result<PlanEvaluation> EvaluatePlan(const PlanRequest& req, const ParallelPlan& plan, const ParamCount& params) {
  PlanEvaluation e;
  e.plan = plan;
  KP_ASSIGN_OR_RETURN(e.split, EvenSplit(req.model.layers, plan.pp * StagesPerRank(req.schedule, plan.vp)));
  e.memory = EstimateMemory(req, plan, e.split, params);
  e.step = EstimateStepTime(req, plan, e.split, params);
  e.violations = e.memory.violations;
  return e;
}

Result<PlanEvaluation> PlanFixed(const PlanRequest& req, const ParamCount& params) {
  KP_RETURN_IF_ERROR(ValidateRequest(req));
  const std::vector<std::string> v = CheckPlan(req, req.plan);
  if (!v.empty()) return Status::InvalidArgument(v.front());
  return EvaluatePlan(req, req.plan, params);
}

}  // namespace kp
