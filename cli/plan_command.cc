// `kimi-plan plan`: builds a PlanRequest from a preset and flags, evaluates
// the fixed plan or searches, records the result in the store, and prints a
// table or JSON.
#include <sstream>

#include "cli/commands.h"
#include "cli/options.h"
#include "common/table.h"
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
  desc.add_options()("help,h", "this text")
      ("preset", po::value<std::string>(), "a seed topology: h200-full, b200-full, h200-lora")
      ("topology-file", po::value<std::string>(), "a topology file in the preset format");
  AddModelOptions(desc);
  AddGpuOptions(desc);
  desc.add_options()
      ("nodes", po::value<int>(), "nodes")
      ("gpus-per-node", po::value<int>(), "GPUs per node (default: the GPU preset's)")
      ("mode", po::value<std::string>(), "full | lora")
      ("lora-rank", po::value<int>(), "LoRA rank (default 32)")
      ("lora-alpha", po::value<double>(), "LoRA alpha (default 2 x rank)")
      ("lora-experts", po::value<std::string>(), "shared-outer | per-expert")
      ("lora-targets", po::value<std::string>(), "comma list of attention, experts, dense (default attention,experts)")
      ("lora-native-base", "keep the frozen base in the model's storage format (INT4 experts)")
      ("prompt-length", po::value<int>(), "prompt tokens (default 2048)")
      ("response-length", po::value<int>(), "response tokens (default 2048)")
      ("seq-len", po::value<int>(), "sequence length: prompt-length = seq-len, response-length = 0")
      ("global-batch", po::value<int>(), "prompts per step (default 128)")
      ("micro-batch", po::value<int>(), "sequences per micro-batch (default 1)")
      ("rollout-n", po::value<int>(), "samples per prompt (default: the preset's, else 1)")
      ("schedule", po::value<std::string>(), "gpipe | 1f1b | interleaved-1f1b | zb-h1 | zb-h2 | zbv | dualpipev")
      ("recompute", po::value<std::string>(), "none | selective | full (default selective)")
      ("sequence-parallel", po::value<std::string>(), "on | off (default on)")
      ("distributed-optimizer", po::value<std::string>(), "on | off (default on)")
      ("flash-attention", po::value<std::string>(), "on | off (default on)")
      ("dtype", po::value<std::string>(), "bf16 | fp16")
      ("placement", po::value<std::string>(), "colocated | split (default colocated)")
      ("rollout-gpus", po::value<int>(), "with --placement split: GPUs of the rollout pool")
      ("gpu-memory-utilization", po::value<double>(), "the rollout engine's share of a colocated GPU (default 0.5)")
      ("tp", po::value<int>(), "tensor parallel")("pp", po::value<int>(), "pipeline parallel")
      ("vp", po::value<int>(), "virtual stages per rank (interleaved-1f1b)")
      ("ep", po::value<int>(), "expert parallel")("etp", po::value<int>(), "expert tensor parallel")
      ("cp", po::value<int>(), "context parallel")("dp", po::value<int>(), "data parallel (default: derived)")
      ("rollout-tp", po::value<int>(), "rollout tensor parallel")("rollout-ep", po::value<int>(), "rollout expert parallel")
      ("rollout-dp", po::value<int>(), "rollout data parallel (default rollout-ep / rollout-tp)")
      ("search", "enumerate every valid plan and rank the feasible ones")
      ("top", po::value<int>(), "with --search: plans to show (default 5)")
      ("matmul-efficiency", po::value<double>(), "achieved / peak tensor throughput (default 0.55)")
      ("comm-efficiency", po::value<double>(), "achieved / peak link bandwidth (default 0.8)")
      ("dp-overlap", po::value<double>(), "share of the DP sync hidden under backward (default 0.5)")
      ("moe-imbalance", po::value<double>(), "busiest expert rank / mean (default 1.2)");
  AddOutputOptions(desc);
  return desc;
}

template <typename T>
void Override(const po::variables_map& vm, const char* name, T* field) {
  if (vm.count(name)) *field = vm[name].as<T>();
}

Status ApplyChoices(const po::variables_map& vm, PlanRequest& r) {
  if (vm.count("mode")) {
    const std::string m = vm["mode"].as<std::string>();
    if (m == "full") r.mode = TrainMode::kFull;
    else if (m == "lora") r.mode = TrainMode::kLora;
    else return Status::InvalidArgument("--mode: must be full or lora, got \"" + m + "\"");
  }
  if (vm.count("lora-experts")) {
    const std::string e = vm["lora-experts"].as<std::string>();
    if (e == "shared-outer") r.lora.experts = LoraExperts::kSharedOuter;
    else if (e == "per-expert") r.lora.experts = LoraExperts::kPerExpert;
    else return Status::InvalidArgument("--lora-experts: must be shared-outer or per-expert, got \"" + e + "\"");
  }
  if (vm.count("lora-targets")) {
    r.lora.attention = r.lora.routed_experts = r.lora.dense_ffn = false;
    std::stringstream ss(vm["lora-targets"].as<std::string>());
    std::string t;
    while (std::getline(ss, t, ',')) {
      if (t == "attention") r.lora.attention = true;
      else if (t == "experts") r.lora.routed_experts = true;
      else if (t == "dense") r.lora.dense_ffn = true;
      else return Status::InvalidArgument("--lora-targets: \"" + t + "\" is not one of attention, experts, dense");
    }
  }
  if (vm.count("lora-native-base")) r.lora.native_base = true;
  if (vm.count("schedule")) {
    KP_ASSIGN_OR_RETURN(r.schedule, ParseSchedule(vm["schedule"].as<std::string>()));
  }
  if (vm.count("recompute")) {
    const std::string v = vm["recompute"].as<std::string>();
    if (v == "none") r.recompute = Recompute::kNone;
    else if (v == "selective") r.recompute = Recompute::kSelective;
    else if (v == "full") r.recompute = Recompute::kFull;
    else return Status::InvalidArgument("--recompute: must be none, selective or full, got \"" + v + "\"");
  }
  KP_ASSIGN_OR_RETURN(r.sequence_parallel, OnOff(vm, "sequence-parallel", r.sequence_parallel));
  KP_ASSIGN_OR_RETURN(r.distributed_optimizer, OnOff(vm, "distributed-optimizer", r.distributed_optimizer));
  KP_ASSIGN_OR_RETURN(r.flash_attention, OnOff(vm, "flash-attention", r.flash_attention));
  if (vm.count("dtype")) {
    const std::string d = vm["dtype"].as<std::string>();
    if (d != "bf16" && d != "fp16") return Status::InvalidArgument("--dtype: must be bf16 or fp16, got \"" + d + "\"");
    r.bf16 = d == "bf16";
  }
  if (vm.count("placement")) {
    const std::string p = vm["placement"].as<std::string>();
    if (p == "colocated") r.placement = Placement::kColocated;
    else if (p == "split") r.placement = Placement::kSplit;
    else return Status::InvalidArgument("--placement: must be colocated or split, got \"" + p + "\"");
  }
  return Status::Ok();
}

Result<PlanRequest> BuildRequest(const po::variables_map& vm, const CliEnv& env, std::string* preset) {
  PlanRequest r;
  TopologySpec topo;
  bool have_topo = false;
  PresetCatalog catalog(env.fs, env.preset_dir);
  if (vm.count("preset") && vm.count("topology-file"))
    return Status::InvalidArgument("--preset: give --preset or --topology-file, not both");
  if (vm.count("preset")) {
    KP_ASSIGN_OR_RETURN(topo, catalog.Topology(vm["preset"].as<std::string>()));
    have_topo = true;
    *preset = topo.name;
  } else if (vm.count("topology-file")) {
    KP_ASSIGN_OR_RETURN(topo, catalog.TopologyFile(vm["topology-file"].as<std::string>()));
    have_topo = true;
    *preset = topo.name;
  }
  KP_ASSIGN_OR_RETURN(r.model, ResolveModel(vm, env, have_topo ? topo.model : ""));
  KP_ASSIGN_OR_RETURN(r.gpu, ResolveGpu(vm, env, have_topo ? topo.gpu : ""));
  r.gpus_per_node = r.gpu.gpus_per_node;
  r.nodes = 1;
  if (have_topo) {
    r.nodes = topo.nodes;
    r.gpus_per_node = topo.gpus_per_node;
    r.mode = topo.mode == "lora" ? TrainMode::kLora : TrainMode::kFull;
    if (topo.lora_rank > 0) r.lora.rank = topo.lora_rank;
    r.plan.tp = topo.actor_tp; r.plan.pp = topo.actor_pp; r.plan.ep = topo.actor_ep;
    r.plan.etp = topo.actor_etp; r.plan.cp = topo.actor_cp;
    r.plan.rollout_tp = topo.rollout_tp; r.plan.rollout_ep = topo.rollout_ep;
    r.rollout_n = topo.rollout_n;
    r.prompt_length = topo.prompt_length;
    r.response_length = topo.response_length;
  }
  Override(vm, "nodes", &r.nodes);
  Override(vm, "gpus-per-node", &r.gpus_per_node);
  Override(vm, "lora-rank", &r.lora.rank);
  r.lora.alpha = 2.0 * r.lora.rank;
  Override(vm, "lora-alpha", &r.lora.alpha);
  Override(vm, "prompt-length", &r.prompt_length);
  Override(vm, "response-length", &r.response_length);
  if (vm.count("seq-len")) {
    r.prompt_length = vm["seq-len"].as<int>();
    r.response_length = 0;
  }
  Override(vm, "global-batch", &r.global_batch);
  Override(vm, "micro-batch", &r.micro_batch);
  Override(vm, "rollout-n", &r.rollout_n);
  Override(vm, "rollout-gpus", &r.rollout_gpus);
  Override(vm, "gpu-memory-utilization", &r.gpu_memory_utilization);
  Override(vm, "top", &r.top);
  Override(vm, "matmul-efficiency", &r.efficiency.matmul);
  Override(vm, "comm-efficiency", &r.efficiency.comm);
  Override(vm, "dp-overlap", &r.efficiency.dp_overlap);
  Override(vm, "moe-imbalance", &r.efficiency.moe_imbalance);
  KP_RETURN_IF_ERROR(ApplyChoices(vm, r));
  ParallelPlan& p = r.plan;
  Override(vm, "tp", &p.tp); Override(vm, "pp", &p.pp); Override(vm, "vp", &p.vp);
  Override(vm, "ep", &p.ep); Override(vm, "etp", &p.etp); Override(vm, "cp", &p.cp);
  Override(vm, "rollout-tp", &p.rollout_tp); Override(vm, "rollout-ep", &p.rollout_ep);
  r.search = vm.count("search") > 0;
  for (const char* flag : {"tp", "pp", "vp", "ep", "etp", "cp", "dp", "rollout-tp", "rollout-ep", "rollout-dp"})
    if (vm.count(flag) && vm[flag].as<int>() <= 0)
      return Status::InvalidArgument(std::string("--") + flag + ": must be a positive integer, got " +
                                     std::to_string(vm[flag].as<int>()));
  KP_RETURN_IF_ERROR(ValidateRequest(r));
  // dp and rollout dp follow from the others unless given.
  const int denom = p.tp * p.pp * p.cp;
  p.dp = denom > 0 && r.actor_gpus() % denom == 0 ? r.actor_gpus() / denom : 0;
  Override(vm, "dp", &p.dp);
  if (!r.search && p.dp <= 0)
    return Status::InvalidArgument("--dp: tp x pp x cp = " + std::to_string(denom) + " does not divide the " +
                                   std::to_string(r.actor_gpus()) + " actor GPUs");
  p.rollout_dp = p.rollout_tp > 0 && p.rollout_ep % p.rollout_tp == 0 && p.rollout_ep > p.rollout_tp
                     ? p.rollout_ep / p.rollout_tp : 1;
  Override(vm, "rollout-dp", &p.rollout_dp);
  return r;
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
  out << "plan      " << PlanLine(e.plan) << "   (" << ScheduleName(r.schedule) << ", recompute "
      << RecomputeName(r.recompute) << ")\n";
  out << "split     " << e.split.ToString() << "\n\n";
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

void PrintSearch(std::ostream& out, const SearchResult& s) {
  out << "search    " << s.evaluated << " valid plans evaluated, " << s.feasible << " feasible, in "
      << FormatFixed(s.seconds, 3) << " s\n";
  if (s.best.empty()) return;
  Table t({"#", "tp", "pp", "vp", "ep", "etp", "cp", "dp", "actor GB", "step s", "tokens/s/GPU", "MFU"});
  int i = 0;
  for (const PlanEvaluation& e : s.best) {
    const ParallelPlan& p = e.plan;
    t.AddRow({std::to_string(++i), std::to_string(p.tp), std::to_string(p.pp), std::to_string(p.vp), std::to_string(p.ep),
              std::to_string(p.etp), std::to_string(p.cp), std::to_string(p.dp),
              FormatFixed(e.memory.actor.total().value() / 1e9, 1), FormatFixed(e.step.total.value(), 2),
              FormatFixed(e.step.tokens_per_s_per_gpu, 0), Pct(e.step.mfu)});
  }
  out << t.Render() << "\n";
}

}  // namespace

Status PlanCommand(const std::vector<std::string>& args, CliEnv& env) {
  const po::options_description desc = PlanOptions();
  po::variables_map vm;
  bool help = false;
  KP_RETURN_IF_ERROR(ParseOptions(args, desc, &vm, &help));
  if (help) {
    env.out << desc << "\n";
    return Status::Ok();
  }
  std::string preset;
  KP_ASSIGN_OR_RETURN(PlanRequest req, BuildRequest(vm, env, &preset));
  const ParamCount pc = CountParams(req.model);

  json result;
  PlanEvaluation shown;
  std::optional<SearchResult> search;
  if (req.search) {
    search = SearchPlans(req, pc);
    if (search->best.empty()) {
      result = {{"schema", kPlanSchema}, {"feasible", false},
                {"violations", {"no feasible plan among " + std::to_string(search->evaluated) + " valid plans on " +
                                std::to_string(req.world()) + " GPUs"}},
                {"model", {{"name", req.model.name}, {"total_params", pc.total}, {"active_params", pc.active}}},
                {"step_time_s", nullptr}, {"tokens_per_s_per_gpu", nullptr}, {"mfu", nullptr}};
    } else {
      shown = search->best.front();
      result = EvaluationToJson(req, pc, shown);
    }
    json top = json::array();
    for (const PlanEvaluation& e : search->best) top.push_back(EvaluationToJson(req, pc, e));
    result["search"] = SearchToJson(*search);
    result["search"]["top"] = top;
  } else {
    KP_ASSIGN_OR_RETURN(shown, PlanFixed(req, pc));
    result = EvaluationToJson(req, pc, shown);
  }
  std::optional<NearestFit> nearest;
  const bool infeasible = result["feasible"] == false;
  if (infeasible) {
    nearest = FindNearestFit(req, pc);
    result["nearest_fit"] = NearestFitToJson(nearest, req);
  }
  result["preset"] = preset.empty() ? json(nullptr) : json(preset);

  KP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(vm["db"].as<std::string>(), env.clock));
  PlanRecord rec;
  rec.model = req.model.name;
  rec.gpu = req.gpu.name;
  rec.world = req.world();
  rec.preset = preset;
  rec.feasible = !infeasible;
  rec.step_time_s = result["step_time_s"].is_number() ? result["step_time_s"].get<double>() : 0.0;
  rec.request_json = RequestToJson(req).dump();
  rec.result_json = result.dump();
  KP_ASSIGN_OR_RETURN(std::int64_t id, store->InsertPlan(rec));
  result["id"] = id;

  if (vm.count("json")) {
    env.out << result.dump(2) << "\n";
    return Status::Ok();
  }
  env.out << "kimi-plan plan #" << id << (preset.empty() ? "" : " (preset " + preset + ")") << "\n\n";
  if (search) PrintSearch(env.out, *search);
  if (!search || !search->best.empty()) PrintEvaluation(env.out, req, pc, shown);
  if (search && search->best.empty()) {
    env.out << "verdict   DOES NOT FIT: no feasible plan on " << req.world() << " GPUs\n";
    if (nearest)
      env.out << "nearest   " << nearest->nodes << " nodes (" << nearest->nodes * req.gpus_per_node << " GPUs): "
              << (nearest->changes.empty() ? "" : "with " + nearest->changes + ": ")
              << PlanLine(nearest->evaluation.plan) << "\n";
    return Status::Ok();
  }
  PrintVerdict(env.out, req, shown, nearest);
  return Status::Ok();
}

}  // namespace kp
