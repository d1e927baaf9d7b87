// Validation of a plan request, loudly and early: first the request's own
// values, then the parallel layout against the model and the cluster. Each
// message names the flag and what is allowed.
#ifndef KIMI_PLAN_PLANNER_CONSTRAINTS_H_
#define KIMI_PLAN_PLANNER_CONSTRAINTS_H_

#include <string>
#include <vector>

#include "common/status.h"
#include "planner/plan_request.h"

namespace kp {

/// Sizes, lengths, batch and option values of the request itself.
Status ValidateRequest(const PlanRequest& req);

/// Every structural rule the layout breaks (empty when it is valid):
/// the sizes multiply to the world; heads divide by TP; experts by EP;
/// EP x ETP divides TP x DP x CP (Megatron's MoE folding); the stages fill
/// the split; CP divides the sequence; the batch divides into
/// micro-batches; rollout EP = rollout TP x rollout DP (Verl/vLLM).
std::vector<std::string> CheckPlan(const PlanRequest& req, const ParallelPlan& p);

/// `message` ("--dp: ...") with its leading flag replaced by where the
/// request took that value from (PlanRequest::value_sources), when a file
/// gave it: "--topology-file t.json: actor.dp: ...".
std::string WithValueSource(const PlanRequest& req, const std::string& message);

}  // namespace kp

#endif  // KIMI_PLAN_PLANNER_CONSTRAINTS_H_
