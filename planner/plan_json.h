// The planner's stable JSON schema (docs/planner.md): what `kimi-plan plan
// --json` prints and what the store keeps in plans.result_json.
#ifndef KIMI_PLAN_PLANNER_PLAN_JSON_H_
#define KIMI_PLAN_PLANNER_PLAN_JSON_H_

#include <nlohmann/json.hpp>

#include "planner/planner.h"
#include "planner/search.h"

namespace kp {

/// "kimi-plan.plan/1"; bumped when a key changes meaning or disappears.
extern const char* const kPlanSchema;

nlohmann::json PlanToJson(const ParallelPlan& p);
/// The request's recompute method ("uniform" | "block") and layer count
/// (N) as JSON values: null unless it recomputes fully.
nlohmann::json RecomputeMethodJson(const PlanRequest& req);
nlohmann::json RecomputeLayersJson(const PlanRequest& req);
/// The whole request, the model and GPU specs included, so a recorded plan
/// can be evaluated again (RequestFromJson) without its presets.
nlohmann::json RequestToJson(const PlanRequest& req);
Result<PlanRequest> RequestFromJson(const nlohmann::json& j);
nlohmann::json EvaluationToJson(const PlanRequest& req, const ParamCount& pc, const PlanEvaluation& e);
nlohmann::json NearestFitToJson(const std::optional<NearestFit>& n, const PlanRequest& req);

}  // namespace kp

#endif  // KIMI_PLAN_PLANNER_PLAN_JSON_H_
