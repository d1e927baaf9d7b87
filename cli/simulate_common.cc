#include "cli/dispatch.h"
#include "cli/plan_options.h"
#include "cli/simulate_commands.h"
#include "common/strict_json.h"
#include "planner/plan_json.h"
#include "store/store.h"

namespace kp {

void AddPlanSourceOptions(po::options_description& desc) {
  desc.add_options()("plan", Int64Flag(1, INT64_MAX), "the id of a plan recorded by `kimi-plan plan`");
  AddPlanRequestOptions(desc);
  AddLayerSplitOption(desc);
}

Result<PricedPlan> LoadPlan(const po::variables_map& vm, const CliEnv& env) {
  PricedPlan p;
  if (vm.count("plan")) {
    if (vm.count("layer-split"))
      return Status::InvalidArgument("--layer-split: a recorded plan keeps the split it was planned with; give "
                                     "--layer-split to `kimi-plan plan`");
    p.plan_id = vm["plan"].as<std::int64_t>();
    if (p.plan_id <= 0) return Status::InvalidArgument("--plan: must be a positive plan id");
    KP_ASSIGN_OR_RETURN(RecordedPlan recorded, ReadRecordedPlan(vm["db"].as<std::string>(), p.plan_id, env));
    if (!recorded.record.feasible && recorded.record.step_time_s == 0)
      return Status::InvalidArgument("--plan: plan " + std::to_string(p.plan_id) + " is a search that found no feasible layout");
    p.request = std::move(recorded.request);
  } else {
    std::string preset;
    KP_ASSIGN_OR_RETURN(p.request, BuildPlanRequest(vm, env, &preset));
  }
  p.params = CountParams(p.request.model);
  KP_ASSIGN_OR_RETURN(p.evaluation, PlanFixed(p.request, p.params));
  return p;
}

Status RecordAndReport(const po::variables_map& vm, const CliEnv& env, const std::string& kind,
                       std::int64_t plan_id, const nlohmann::json& request, nlohmann::json& result,
                       const std::function<void(std::int64_t id)>& print_table) {
  // An input out of proportion can overflow a figure that every range check
  // passed: nothing such is shown or kept.
  KP_RETURN_IF_ERROR(CheckFiniteNumbers(result, "simulate " + kind));
  KP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(vm["db"].as<std::string>(), env.clock));
  SimulationRecord r;
  r.kind = kind;
  r.plan_id = plan_id;
  r.request_json = request.dump();
  r.result_json = result.dump();
  // Recorded only if it is reported: one transaction, rolled back when
  // standard output cannot be written.
  return store->InTransaction([&]() -> Status {
    KP_ASSIGN_OR_RETURN(const std::int64_t id, store->InsertSimulation(r));
    result["id"] = id;
    if (vm.count("json")) env.out << result.dump(2) << "\n";
    else print_table(id);
    return CheckOutput(env.out);
  });
}

}  // namespace kp
