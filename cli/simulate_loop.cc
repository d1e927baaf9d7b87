// `kimi-plan simulate loop`: the SDPO loop of a plan, or of explicit costs.
#include <cmath>

#include "cli/output_paths.h"
#include "cli/simulate_commands.h"
#include "common/limits.h"
#include "common/range.h"
#include "common/strict_json.h"
#include "common/table.h"
#include "planner/plan_json.h"
#include "simulator/loop_costs.h"

namespace kp {

namespace {

using nlohmann::json;

// How a plan's loop is priced beyond the plan itself.
po::options_description PlanCostOptions() {
  po::options_description desc;
  desc.add_options()
      ("verifier-s", NumberFlag(0, limits::kMaxSeconds, /*min_open=*/true), "seconds to verify one sample on one CPU worker (default 0.05)")
      ("verifier-workers", IntFlag(1, 1 << 20), "CPU verifier workers (default 64)")
      ("feedback-tokens", IntFlag(0, limits::kMaxSequence), "tokens of feedback the teacher's reprompt adds (default 256)")
      ("hbm-efficiency", NumberFlag(0, 1, /*min_open=*/true), "achieved / peak HBM bandwidth while decoding (default 0.7)")
      ("sync-network", po::value<std::string>()->default_value("rdma"), "rdma | tcp");
  return desc;
}

po::options_description LoopOptionsDesc() {
  po::options_description desc("kimi-plan simulate loop [options]\n\n"
                               "Simulates the SDPO loop's five systems (rollout, feedback, self-teacher,\n"
                               "training, weight sync) over several steps. Costs come from a plan (--plan ID\n"
                               "or the plan options) or are given explicitly (--rollout-s ... --sync-s). Options");
  desc.add_options()("help,h", "this text");
  AddPlanSourceOptions(desc);
  desc.add(PlanCostOptions());
  desc.add_options()
      ("steps", IntFlag(2, limits::kMaxLoopSteps)->default_value(6), "steps to simulate")
      ("off-policy", "split placement: rollout k uses the weights of step k-2 and overlaps training")
      ("rollout-s", NumberFlag(0, limits::kMaxSeconds), "explicit cost: rollout seconds per step")
      ("feedback-s", NumberFlag(0, limits::kMaxSeconds), "explicit cost: feedback seconds per step")
      ("teacher-s", NumberFlag(0, limits::kMaxSeconds), "explicit cost: teacher seconds per step")
      ("train-s", NumberFlag(0, limits::kMaxSeconds), "explicit cost: training seconds per step")
      ("sync-s", NumberFlag(0, limits::kMaxSeconds), "explicit cost: weight-sync seconds per step")
      ("actor-gpus", IntFlag(1, limits::kMaxClusterGpus), "explicit costs: GPUs of the actor (or the whole colocated pool)")
      ("out", po::value<std::string>(), "write loop.svg and loop.html to this directory");
  AddOutputOptions(desc);
  return desc;
}

// A plan's derived costs fit the loop's clock as explicit ones must: an
// efficiency or bandwidth far too small gives a step of centuries.
Status CheckPlanCosts(const LoopCosts& c) {
  for (int s = 0; s < kLoopSystems; ++s) {
    const double secs = c.of(LoopSystem(s)).value();
    if (std::isfinite(secs) && secs <= limits::kMaxSeconds) continue;
    return Status::InvalidArgument(std::string("the plan prices the ") + LoopSystemName(LoopSystem(s)) + " at " +
                                   ShowNumber(secs) + " s per step, beyond one year: an efficiency given is far too "
                                   "small (--hbm-efficiency, --matmul-efficiency, --comm-efficiency)");
  }
  return Status::Ok();
}

bool ExplicitCosts(const po::variables_map& vm) {
  for (const char* k : {"rollout-s", "feedback-s", "teacher-s", "train-s", "sync-s"})
    if (vm.count(k)) return true;
  return false;
}

Result<LoopCosts> CostsFromFlags(const po::variables_map& vm) {
  LoopCosts c;
  const std::pair<const char*, Seconds*> fields[] = {{"rollout-s", &c.rollout}, {"feedback-s", &c.feedback},
                                                      {"teacher-s", &c.teacher}, {"train-s", &c.train},
                                                      {"sync-s", &c.sync}};
  for (const auto& [flag, field] : fields) {
    if (!vm.count(flag)) return Status::InvalidArgument(std::string("--") + flag + ": explicit costs need all five of --rollout-s --feedback-s --teacher-s --train-s --sync-s");
    *field = Seconds(vm[flag].as<double>());
  }
  return c;
}

template <typename T>
void Set(const po::variables_map& vm, const char* k, T* v) {
  if (vm.count(k)) *v = vm[k].as<T>();
}

void PrintLoop(std::ostream& out, std::int64_t id, const LoopCosts& c, const LoopResult& r, const LoopOptions& o) {
  out << "kimi-plan simulate loop #" << id << ": " << (o.placement == LoopPlacement::kColocated ? "colocated" : "split")
      << (o.off_policy_overlap ? ", one step off-policy" : "") << ", " << o.steps << " steps\n\n";
  Table t({"system", "seconds per step", "share of the step"});
  for (int s = 0; s < kLoopSystems; ++s)
    t.AddRow({LoopSystemName(LoopSystem(s)), FormatFixed(c.of(LoopSystem(s)).value(), 3),
              FormatFixed(100 * r.share[s], 1) + "%"});
  out << t.Render() << "\nstep      " << FormatFixed(r.step_time.value(), 3) << " s (steady state), GPUs idle "
      << FormatFixed(100 * r.gpu_idle_fraction, 1) << "% of the time, " << r.events << " events\n";
}

}  // namespace

Status SimulateLoopCommand(const std::vector<std::string>& args, CliEnv& env) {
  const po::options_description desc = LoopOptionsDesc();
  po::variables_map vm;
  KP_ASSIGN_OR_RETURN(const bool proceed, ParseCommand(args, desc, &vm, env.out));
  if (!proceed) return Status::Ok();
  KP_RETURN_IF_ERROR(CheckOutputDirectory(vm, env, "out"));
  LoopOptions o;
  o.steps = vm["steps"].as<int>();
  o.off_policy_overlap = vm.count("off-policy") > 0;
  json request = {{"steps", o.steps}, {"off_policy", o.off_policy_overlap}};
  json details = json::object();
  LoopCosts costs;
  std::int64_t plan_id = 0;
  if (ExplicitCosts(vm)) {
    KP_ASSIGN_OR_RETURN(costs, CostsFromFlags(vm));
    if (!vm.count("actor-gpus")) return Status::InvalidArgument("--actor-gpus: explicit costs need the GPU count");
    o.actor_gpus = vm["actor-gpus"].as<int>();
    if (vm.count("placement") && vm["placement"].as<std::string>() == "split") {
      o.placement = LoopPlacement::kSplit;
      Set(vm, "rollout-gpus", &o.rollout_gpus);
    }
    // Explicit costs take no plan: a plan flag would be ignored.
    po::options_description plan_flags;
    AddPlanSourceOptions(plan_flags);
    plan_flags.add(PlanCostOptions());
    const std::string unused = FirstGivenFlag(vm, plan_flags, {"placement", "rollout-gpus"});
    if (!unused.empty())
      return Status::InvalidArgument(unused + ": prices a plan, and explicit costs (--rollout-s ...) take none");
    KP_RETURN_IF_ERROR(FlagNeeds(vm, "rollout-gpus", o.placement == LoopPlacement::kSplit, "--placement split"));
  } else {
    KP_RETURN_IF_ERROR(FlagNeeds(vm, "actor-gpus", false, "explicit costs (--rollout-s ...); a plan sizes the GPUs"));
    KP_ASSIGN_OR_RETURN(PricedPlan plan, LoadPlan(vm, env));
    plan_id = plan.plan_id;
    const PlanRequest& req = plan.request;
    LoopCostOptions co;
    Set(vm, "verifier-s", &co.verifier_seconds);
    Set(vm, "verifier-workers", &co.verifier_workers);
    Set(vm, "feedback-tokens", &co.feedback_tokens);
    Set(vm, "hbm-efficiency", &co.hbm_efficiency);
    const std::string net = vm["sync-network"].as<std::string>();
    if (net != "rdma" && net != "tcp") return Status::InvalidArgument("--sync-network: must be rdma or tcp, got \"" + net + "\"");
    KP_ASSIGN_OR_RETURN(co.sync, PlanSyncTime(req, plan.evaluation.plan, net == "rdma" ? Network::kRdma : Network::kTcp));
    KP_ASSIGN_OR_RETURN(LoopCostBreakdown b, EstimateLoopCosts(req, plan.evaluation, plan.params, co));
    costs = b.costs;
    o.placement = req.placement == Placement::kSplit ? LoopPlacement::kSplit : LoopPlacement::kColocated;
    o.actor_gpus = req.actor_gpus();
    o.rollout_gpus = req.placement == Placement::kSplit ? req.rollout_gpus : 0;
    request["plan"] = RequestToJson(req);
    details = {{"rollout_engines", b.rollout.engines}, {"samples_per_engine", b.rollout.samples_per_engine},
               {"concurrency", b.rollout.concurrency}, {"waves", b.rollout.waves},
               {"prefill_s", b.rollout.prefill.value()}, {"decode_step_s", b.rollout.decode_step.value()},
               {"teacher_tokens", b.teacher_tokens}, {"sync_network", net}};
  }
  request["placement"] = o.placement == LoopPlacement::kSplit ? "split" : "colocated";
  if (!ExplicitCosts(vm)) KP_RETURN_IF_ERROR(CheckPlanCosts(costs));
  KP_ASSIGN_OR_RETURN(LoopResult r, SimulateLoop(costs, o));
  json systems = json::object(), shares = json::object();
  for (int s = 0; s < kLoopSystems; ++s) {
    systems[LoopSystemName(LoopSystem(s))] = costs.of(LoopSystem(s)).value();
    shares[LoopSystemName(LoopSystem(s))] = r.share[s];
  }
  json result = {{"schema", "kimi-plan.loop/1"}, {"plan_id", plan_id ? json(plan_id) : json(nullptr)},
                 {"costs_s", systems}, {"shares", shares}, {"step_time_s", r.step_time.value()},
                 {"makespan_s", r.makespan.value()}, {"gpu_idle_fraction", r.gpu_idle_fraction},
                 {"events", r.events}, {"details", details}};
  KP_RETURN_IF_ERROR(CheckFiniteNumbers(result, "simulate loop"));
  if (vm.count("out")) {
    const std::string dir = vm["out"].as<std::string>();
    const std::string svg = LoopTimelineSvg(r);
    KP_RETURN_IF_ERROR(env.fs.WriteFile(dir + "/loop.svg", svg));
    KP_RETURN_IF_ERROR(env.fs.WriteFile(dir + "/loop.html", "<!doctype html><meta charset='utf-8'><title>SDPO loop</title>"
                                                            "<body style='font-family:sans-serif'>" + svg + "</body>\n"));
  }
  return RecordAndReport(vm, env, "loop", plan_id, request, result,
                         [&](std::int64_t id) { PrintLoop(env.out, id, costs, r, o); });
}

}  // namespace kp
