// The `simulate` sub-commands, one file each, and what they share: loading
// the plan a simulation prices (which `launch` uses too) and recording the
// simulation in the store.
#ifndef KIMI_PLAN_CLI_SIMULATE_COMMANDS_H_
#define KIMI_PLAN_CLI_SIMULATE_COMMANDS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "cli/options.h"
#include "planner/planner.h"

namespace kp {

Status SimulateLoopCommand(const std::vector<std::string>& args, CliEnv& env);
Status SimulateAttnResCommand(const std::vector<std::string>& args, CliEnv& env);
Status SimulateSyncCommand(const std::vector<std::string>& args, CliEnv& env);
Status SimulatePipelineCommand(const std::vector<std::string>& args, CliEnv& env);

/// A plan to price: from `--plan ID` (the store) or from the plan-request
/// options (`--preset`, `--model` ...), evaluated.
struct PricedPlan {
  std::int64_t plan_id = 0;  ///< 0 when built from options
  PlanRequest request;
  ParamCount params;
  PlanEvaluation evaluation;
};

/// Adds --plan and the plan-request options.
void AddPlanSourceOptions(po::options_description& desc);
Result<PricedPlan> LoadPlan(const po::variables_map& vm, const CliEnv& env);

/// Refuses a `result` with a number that is not finite, then records the
/// simulation and prints it (`result` with its "id" under --json, else
/// `print_table(id)`) in one transaction: nothing is recorded whose output
/// could not be written.
Status RecordAndReport(const po::variables_map& vm, const CliEnv& env, const std::string& kind,
                       std::int64_t plan_id, const nlohmann::json& request, nlohmann::json& result,
                       const std::function<void(std::int64_t id)>& print_table);


}  // namespace kp

#endif  // KIMI_PLAN_CLI_SIMULATE_COMMANDS_H_
