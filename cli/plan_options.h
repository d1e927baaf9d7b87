// Options describing a plan request, shared by the commands that plan or
// simulate one.
#ifndef KIMI_PLAN_CLI_PLAN_OPTIONS_H_
#define KIMI_PLAN_CLI_PLAN_OPTIONS_H_

#include <string>

#include "cli/options.h"
#include "planner/plan_request.h"
#include "store/store.h"

namespace kp {

/// --preset / --topology-file, the model and GPU options, the cluster, the
/// workload, the layout (--tp ... --rollout-dp) and the efficiency factors.
void AddPlanRequestOptions(po::options_description& desc);

/// --layer-split: for the commands whose plan may take another split than
/// the even one (plan, simulate, launch; not run, whose runtime builds the
/// even split only).
void AddLayerSplitOption(po::options_description& desc);

/// The request those options describe: the files and presets they name
/// read here, the rest built by the planner (planner/plan_request_builder.h:
/// validated, dp and rollout dp derived unless given); *preset receives the
/// topology's name when one was used.
Result<PlanRequest> BuildPlanRequest(const po::variables_map& vm, const CliEnv& env, std::string* preset);

/// A plan `kimi-plan plan` recorded in the store at `db`: its row and the
/// request read back from it. Errors name --db (a store that does not
/// exist: nothing is created) or --plan (no such plan, an unreadable
/// request).
struct RecordedPlan {
  PlanRecord record;
  PlanRequest request;
};
Result<RecordedPlan> ReadRecordedPlan(const std::string& db, std::int64_t id, const CliEnv& env);

}  // namespace kp

#endif  // KIMI_PLAN_CLI_PLAN_OPTIONS_H_
