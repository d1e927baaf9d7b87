// Two evaluated plans side by side, term by term: the settings, the actor's
// memory terms and the step-time terms. What `plan --search` prints as "why
// this beats the preset".
#ifndef KIMI_PLAN_PLANNER_PLAN_COMPARE_H_
#define KIMI_PLAN_PLANNER_PLAN_COMPARE_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/planner.h"

namespace kp {

enum class TermUnit { kSetting, kSeconds, kBytes, kTokensPerSecond };

struct PlanTerm {
  std::string name;   ///< "recompute", "memory: activations", "step: bubble"
  TermUnit unit = TermUnit::kSetting;
  nlohmann::json a, b;  ///< a string for a setting, a number otherwise
  bool differs = false;
};

/// Every term of plan a (evaluated under a_req) beside plan b's, in a fixed
/// order: settings, then the actor's memory on its worst rank and the GPU's
/// headroom, then the step's terms and the throughput. The layer split is
/// summarised (rule, stages, layers per stage); the plans' JSON has it
/// whole. Numbers differ when they are more than one part in 10^9 apart.
std::vector<PlanTerm> CompareTerms(const PlanRequest& a_req, const PlanEvaluation& a, const PlanRequest& b_req,
                                   const PlanEvaluation& b);

/// The terms as JSON: [{"term", "unit", "preset", "best", "differs"}], the
/// two sides named `a_name` and `b_name`.
nlohmann::json TermsToJson(const std::vector<PlanTerm>& terms, const std::string& a_name, const std::string& b_name);

}  // namespace kp

#endif  // KIMI_PLAN_PLANNER_PLAN_COMPARE_H_
