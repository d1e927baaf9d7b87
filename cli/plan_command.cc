// `kimi-plan plan`: builds a PlanRequest from a preset and flags, evaluates
// the fixed plan or searches, records the result in the store, and prints a
// table or JSON.
#include <sstream>

#include "cli/commands.h"
#include "cli/dispatch.h"
#include "cli/options.h"
#include "cli/plan_options.h"
#include "cli/plan_search.h"
#include "common/strict_json.h"
#include "common/table.h"
#include "launcher/launch_spec.h"
#include "planner/constraints.h"
#include "planner/plan_json.h"
#include "planner/search.h"
#include "specs/presets.h"
#include "store/store.h"

namespace kp {

namespace {

using nlohmann::json;

po::options_description PlanOptions() {
  po::options_description desc("kimi-plan plan [options]\n\n"
                               "Sizes the actor, reference and rollout of an SDPO run on a cluster and\n"
                               "predicts memory per GPU and step time. Options");
  desc.add_options()("help,h", "this text");
  AddPlanRequestOptions(desc);
  AddLayerSplitOption(desc);
  desc.add_options()
      ("engine", po::value<std::string>(), "native | verl: whose stage split is the default (even | megatron)")
      ("search", "search every setting: layout, micro-batch, recompute, schedule, split, placement, rollout")
      ("top", IntFlag(1, 1000), "with --search: plans to show (default 5)");
  AddOutputOptions(desc);
  return desc;
}

std::string PlanLine(const ParallelPlan& p) {
  std::ostringstream o;
  o << "tp " << p.tp << "  pp " << p.pp << "  vp " << p.vp << "  ep " << p.ep << "  etp " << p.etp << "  cp " << p.cp
    << "  dp " << p.dp << "   rollout tp " << p.rollout_tp << " ep " << p.rollout_ep << " dp " << p.rollout_dp;
  return o.str();
}

std::string Pct(double x) { return FormatFixed(100 * x, 1) + "%"; }

void PrintEvaluation(std::ostream& out, const PlanRequest& r, const ParamCount& pc, const PlanEvaluation& e) {
  out << "model     " << r.model.name << ": " << FormatCount(pc.total) << " parameters, " << FormatCount(pc.active)
      << " active per token\n";
  out << "cluster   " << r.nodes << " x " << r.gpus_per_node << " " << r.gpu.name << " = " << r.world() << " GPUs ("
      << FormatGB(r.gpu.memory.value()) << " each), "
      << (r.mode == TrainMode::kFull ? std::string("full fine-tuning")
                                     : "LoRA rank " + std::to_string(r.lora.rank) + " " + LoraExpertsName(r.lora.experts))
      << ", " << (r.placement == Placement::kColocated ? "colocated" : "split") << "\n";
  out << "plan      " << PlanLine(e.plan) << "   (" << ScheduleName(r.schedule) << ", " << SendModeName(r.p2p())
      << " sends, recompute " << RecomputeLabel(r) << ")\n";
  out << "split     " << e.layer_split.ToString() << ": " << e.split.ToString() << "\n";
  // What Megatron (launch --engine verl) is given to build the same split.
  if (e.plan.pp > 1 && (r.schedule == ScheduleKind::k1F1B || r.schedule == ScheduleKind::kInterleaved1F1B))
    if (Result<MegatronStageLayers> m = MegatronLayersOfPlan(r, e); m.ok())
      out << "megatron  " << MegatronFieldsText(*m) << "\n";
  out << "\n";
  Table t({"role", "weights", "grads", "optimizer", "activations", "other", "total", "capacity", "fits"});
  auto row = [&](const char* name, const RoleMemory& m) {
    t.AddRow({name, FormatGB(m.weights.value()), FormatGB(m.grads.value()), FormatGB(m.optimizer.value()),
              FormatGB(m.activations.value()), FormatGB(m.other.value()), FormatGB(m.total().value()),
              FormatGB(m.capacity.value()), m.fits() ? "yes" : "NO"});
  };
  row("actor", e.memory.actor);
  row("reference", e.memory.reference);
  row("rollout", e.memory.rollout);
  out << "memory per GPU (worst pipeline rank)\n" << t.Render();
  if (r.placement == Placement::kColocated)
    out << "colocated phase peaks: training " << FormatGB(e.memory.phases.train.value()) << ", reference "
        << FormatGB(e.memory.phases.reference.value()) << ", rollout " << FormatGB(e.memory.phases.rollout.value())
        << " of " << FormatGB(r.gpu.memory.value()) << "\n";
  out << "rollout KV: " << FormatGB(e.memory.rollout_kv_per_sequence.value()) << " per " << r.seq_length()
      << "-token sequence per GPU, " << FormatFixed(e.memory.rollout_concurrency, 0)
      << " concurrent sequences per engine\n\n";
  const StepTime& s = e.step;
  out << "step      " << FormatFixed(s.total.value(), 2) << " s for " << s.microbatches << " micro-batches x dp "
      << e.plan.dp << " (compute " << FormatFixed(s.compute.value(), 2) << ", bubble " << FormatFixed(s.bubble.value(), 2)
      << ", tp " << FormatFixed(s.tp_comm.value(), 2) << ", ep " << FormatFixed(s.ep_comm.value(), 2) << ", cp "
      << FormatFixed(s.cp_comm.value(), 2) << ", pp " << FormatFixed(s.pp_comm.value(), 2) << ", dp "
      << FormatFixed(s.dp_comm.value(), 2) << ", optimizer " << FormatFixed(s.optimizer.value(), 2) << ")\n";
  out << "          " << FormatFixed(s.tokens_per_s_per_gpu, 0) << " tokens/s per GPU, MFU " << Pct(s.mfu) << "\n";
  out << "priced    " << PricingOf(r) << "\n";
}

void PrintVerdict(std::ostream& out, const PlanRequest& r, const PlanEvaluation& e, const std::optional<NearestFit>& n) {
  if (e.feasible()) {
    out << "verdict   FITS: every role fits on every rank\n";
    return;
  }
  out << "verdict   DOES NOT FIT\n";
  for (const std::string& v : e.violations) out << "          - " << v << "\n";
  if (!n) {
    out << "nearest   no plan fits on up to 8 x the nodes\n";
    return;
  }
  out << "nearest   " << (n->nodes == r.nodes ? "on this cluster: " : std::to_string(n->nodes) + " nodes (" +
                                                    std::to_string(n->nodes * r.gpus_per_node) + " GPUs): ")
      << (n->changes.empty() ? "" : "with " + n->changes + ": ") << PlanLine(n->evaluation.plan) << ", "
      << FormatFixed(n->evaluation.step.total.value(), 2) << " s/step, actor "
      << FormatGB(n->evaluation.memory.actor.total().value()) << "\n";
}

// With --engine verl the split must be one Megatron builds: refused here,
// naming --layer-split, rather than when the job is generated.
Status CheckEngineSplit(const po::variables_map& vm, const PlanRequest& req, const PlanEvaluation& e) {
  if (!vm.count("engine") || vm["engine"].as<std::string>() != "verl") return Status::Ok();
  if (req.schedule != ScheduleKind::k1F1B && req.schedule != ScheduleKind::kInterleaved1F1B) return Status::Ok();
  return MegatronLayersOfPlan(req, e).status();
}

// The table of a recorded plan (or a search's result).
void PrintPlanOutput(std::ostream& out, std::int64_t id, const std::string& preset, const PlanRequest& req,
                     const PlanRequest& shown_req, const ParamCount& pc, const PlanEvaluation& shown,
                     const std::optional<PlanSearchOutput>& search, const std::optional<NearestFit>& nearest,
                     bool has_plan) {
  out << "kimi-plan plan #" << id << (preset.empty() ? "" : " (preset " + preset + ")") << "\n\n";
  if (search) out << search->head;
  if (!has_plan) {
    out << "verdict   DOES NOT FIT: no feasible plan on " << req.world() << " GPUs\n";
    if (nearest)
      out << "nearest   " << nearest->nodes << " nodes (" << nearest->nodes * req.gpus_per_node << " GPUs): "
          << (nearest->changes.empty() ? "" : "with " + nearest->changes + ": ") << PlanLine(nearest->evaluation.plan)
          << "\n";
    out << search->versus_preset;
    return;
  }
  PrintEvaluation(out, shown_req, pc, shown);
  PrintVerdict(out, shown_req, shown, nearest);
  if (search) out << search->versus_preset;
}

}  // namespace

Status PlanCommand(const std::vector<std::string>& args, CliEnv& env) {
  const po::options_description desc = PlanOptions();
  po::variables_map vm;
  KP_ASSIGN_OR_RETURN(const bool proceed, ParseCommand(args, desc, &vm, env.out));
  if (!proceed) return Status::Ok();
  std::string preset;
  KP_ASSIGN_OR_RETURN(PlanRequest req, BuildPlanRequest(vm, env, &preset));
  req.search = vm.count("search") > 0;
  KP_RETURN_IF_ERROR(FlagNeeds(vm, "top", req.search, "--search"));
  if (vm.count("top")) req.top = vm["top"].as<int>();
  KP_RETURN_IF_ERROR(ValidateRequest(req));
  // A search can take a while: a store it could not write is refused first.
  KP_RETURN_IF_ERROR(Store::CheckPath(vm["db"].as<std::string>()));
  const ParamCount pc = CountParams(req.model);

  json result;
  PlanEvaluation shown;
  PlanRequest shown_req = req;
  std::optional<PlanSearchOutput> search;
  if (req.search) {
    KP_ASSIGN_OR_RETURN(search, SearchForPlan(vm, env, req, pc, preset));
    if (!search->best_request) {
      result = {{"schema", kPlanSchema}, {"feasible", false},
                {"violations", {"no feasible plan among " + std::to_string(search->search.counts.considered) +
                                " candidates on " + std::to_string(req.world()) + " GPUs"}},
                {"model", {{"name", req.model.name}, {"total_params", pc.total}, {"active_params", pc.active}}},
                {"step_time_s", nullptr}, {"tokens_per_s_per_gpu", nullptr}, {"mfu", nullptr}};
    } else {
      shown = search->search.top.front().evaluation;
      shown_req = *search->best_request;
      KP_RETURN_IF_ERROR(CheckEngineSplit(vm, shown_req, shown));
      result = EvaluationToJson(shown_req, pc, shown);
    }
    result["search"] = search->json;
  } else {
    KP_ASSIGN_OR_RETURN(shown, PlanFixed(req, pc));
    KP_RETURN_IF_ERROR(CheckEngineSplit(vm, req, shown));
    result = EvaluationToJson(req, pc, shown);
  }
  std::optional<NearestFit> nearest;
  const bool infeasible = result["feasible"] == false;
  if (infeasible) {
    // A search already searched larger clusters over the whole space.
    nearest = search ? search->nearest : FindNearestFit(req, pc);
    result["nearest_fit"] = NearestFitToJson(nearest, req);
  }
  result["preset"] = preset.empty() ? json(nullptr) : json(preset);

  // An input out of proportion (a tiny efficiency, a huge cost) can overflow
  // a figure that every range check passed: nothing such is shown or kept.
  KP_RETURN_IF_ERROR(CheckFiniteNumbers(result, "the plan"));
  KP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(vm["db"].as<std::string>(), env.clock));
  PlanRecord rec;
  rec.model = req.model.name;
  rec.gpu = req.gpu.name;
  rec.world = req.world();
  rec.preset = preset;
  rec.feasible = !infeasible;
  rec.step_time_s = result["step_time_s"].is_number() ? result["step_time_s"].get<double>() : 0.0;
  // The request as evaluated: after a search, the plan and settings it
  // chose, so that `--plan ID` elsewhere reproduces what this record describes.
  const bool has_plan = !search || search->best_request.has_value();
  PlanRequest recorded = shown_req;
  if (has_plan) {
    recorded.plan = shown.plan;
    recorded.layer_split = shown.layer_split;
  }
  rec.request_json = RequestToJson(recorded).dump();
  rec.result_json = result.dump();
  rec.layer_split = recorded.layer_split.ToString();
  if (has_plan)
    rec.layer_counts = LayerSplit{LayerSplitKind::kExplicit, LayerCounts(shown.split)}.ToString();
  // Recorded only if it is reported: the insert and the output share one
  // transaction, rolled back when standard output cannot be written.
  return store->InTransaction([&]() -> Status {
    KP_ASSIGN_OR_RETURN(const std::int64_t id, store->InsertPlan(rec));
    result["id"] = id;
    if (vm.count("json")) env.out << result.dump(2) << "\n";
    else PrintPlanOutput(env.out, id, preset, req, shown_req, pc, shown, search, nearest, has_plan);
    return CheckOutput(env.out);
  });
}

}  // namespace kp
