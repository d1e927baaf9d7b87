// The options that describe a plan request, shared by `plan` and
// `simulate`: a preset or a topology file, the model, the GPU, the cluster,
// the workload and the parallel layout.
#include "cli/plan_options.h"

#include <sstream>

#include "common/limits.h"
#include "common/text.h"
#include "planner/constraints.h"
#include "planner/plan_json.h"
#include "specs/presets.h"

namespace kp {

void AddPlanRequestOptions(po::options_description& desc) {
  desc.add_options()
      ("preset", po::value<std::string>(), "a seed topology: h200-full, b200-full, h200-lora")
      ("topology-file", po::value<std::string>(), "a topology file in the preset format");
  AddModelOptions(desc);
  AddGpuOptions(desc);
  desc.add_options()
      ("nodes", IntFlag(1, limits::kMaxNodes), "nodes")
      ("gpus-per-node", IntFlag(1, limits::kMaxGpusPerNode), "GPUs per node (default: the GPU preset's)")
      ("mode", po::value<std::string>(), "full | lora")
      ("lora-rank", IntFlag(1, limits::kMaxHidden), "LoRA rank (default 32)")
      ("lora-alpha", NumberFlag(0, 1e6, /*min_open=*/true), "LoRA alpha (default 2 x rank)")
      ("lora-experts", po::value<std::string>(), "shared-outer | per-expert")
      ("lora-targets", po::value<std::string>(), "comma list of attention, experts, dense (default attention,experts)")
      ("lora-native-base", "keep the frozen base in the model's storage format (INT4 experts)")
      ("prompt-length", IntFlag(1, limits::kMaxSequence), "prompt tokens (default 2048)")
      ("response-length", IntFlag(0, limits::kMaxSequence), "response tokens (default 2048)")
      ("seq-len", IntFlag(1, limits::kMaxSequence), "sequence length: prompt-length = seq-len, response-length = 0")
      ("global-batch", IntFlag(1, limits::kMaxBatch), "prompts per step (default 128)")
      ("micro-batch", IntFlag(1, limits::kMaxBatch), "sequences per micro-batch (default 1)")
      ("rollout-n", IntFlag(1, limits::kMaxBatch), "samples per prompt (default: the preset's, else 1)")
      ("schedule", po::value<std::string>(), "gpipe | 1f1b | interleaved-1f1b | zb-h1 | zb-h2 | zbv | dualpipev (default: the preset's; interleaved-1f1b with --vp > 1)")
      ("optimizer-sync", po::value<std::string>(),
       "sync | post-validation (default: post-validation for zb-h1, zb-h2 and zbv, as the ZB paper runs them; else sync)")
      ("p2p", po::value<std::string>(),
       "async | blocking: how pipeline ranks send (default: blocking for 1f1b and interleaved-1f1b with --engine verl, as Megatron-LM runs them; else async)")
      ("recompute", po::value<std::string>(), "none | selective | full (default selective)")
      ("recompute-method", po::value<std::string>(),
       "with --recompute full: uniform | block (Megatron-LM's; default uniform)")
      ("recompute-num-layers", IntFlag(1, limits::kMaxLayers),
       "with --recompute full: uniform: layers per checkpointed group; block: layers recomputed per pipeline chunk (default 1)")
      ("sequence-parallel", po::value<std::string>()->implicit_value("on"), "on | off (default on)")
      ("distributed-optimizer", po::value<std::string>()->implicit_value("on"), "on | off (default on)")
      ("flash-attention", po::value<std::string>()->implicit_value("on"), "on | off (default on)")
      ("dtype", po::value<std::string>(),
       "bf16 | fp16 | fp8-tensorwise | fp8-blockwise | mxfp8 (Blackwell): the linear layers' recipe (default bf16)")
      ("fp8-param-gather", po::value<std::string>()->implicit_value("on"),
       "on | off: with an FP8 recipe, weights kept and all-gathered in FP8 (Megatron's --fp8-param-gather; default off)")
      ("optimizer-moments", po::value<std::string>(), "fp32 | bf16: Adam's two moments (Megatron's exp_avg(_sq)_dtype; default fp32)")
      ("grad-reduce-in-fp32", po::value<std::string>()->implicit_value("on"),
       "on | off: under bf16, the gradient buffer and its reduction in fp32 (Megatron-LM's; default on) or bf16")
      ("recompute-modules", po::value<std::string>(),
       "with --recompute selective: Megatron's modules, comma separated: core_attn, moe_act, layernorm, mla_up_proj, "
       "mlp, moe, shared_experts (default core_attn)")
      ("dispatcher", po::value<std::string>(), "alltoall | deepep | hybridep: the MoE token dispatcher (default alltoall)")
      ("cuda-graphs", po::value<std::string>(),
       "none | modules: CUDA graphs of the attention, router and MoE preprocessing (Megatron's cuda_graph_impl "
       "transformer_engine; default none)")
      ("a2a-overlap", po::value<std::string>()->implicit_value("on"),
       "on | off: overlap the expert all-to-all with the other micro-batch's compute (Megatron's "
       "--overlap-moe-expert-parallel-comm; default off)")
      ("state-precision", po::value<std::string>(),
       "mixed | fp32: the actor's weights, gradients and optimizer per parameter: Megatron-LM's 2 + 4 + 12 bytes, or kimi-plan run's fp32 4 + 4 + 8 (default mixed)")
      ("grad-bucket-mib", NumberFlag(0, 1 << 20),
       "the copy the engine's gradient reduction holds, in MiB (kimi-plan run: 25; default 0, Megatron-LM's in-place buffer)")
      ("activation-profile", po::value<std::string>(),
       "price activations from this measured profile (kimi-plan profile) instead of Megatron-LM's terms")
      ("placement", po::value<std::string>(), "colocated | split (default colocated)")
      ("rollout-gpus", IntFlag(1, limits::kMaxClusterGpus), "with --placement split: GPUs of the rollout pool")
      ("gpu-memory-utilization", NumberFlag(0, 1, /*min_open=*/true), "the rollout engine's share of a colocated GPU (default 0.5)")
      ("tp", IntFlag(1, limits::kMaxClusterGpus), "tensor parallel")("pp", IntFlag(1, limits::kMaxClusterGpus), "pipeline parallel")
      ("vp", IntFlag(1, limits::kMaxLayers), "virtual stages per rank (interleaved-1f1b)")
      ("ep", IntFlag(1, limits::kMaxClusterGpus), "expert parallel")("etp", IntFlag(1, limits::kMaxClusterGpus), "expert tensor parallel")
      ("cp", IntFlag(1, limits::kMaxClusterGpus), "context parallel")("dp", IntFlag(1, limits::kMaxClusterGpus), "data parallel (default: derived)")
      ("rollout-tp", IntFlag(1, limits::kMaxClusterGpus), "rollout tensor parallel")("rollout-ep", IntFlag(1, limits::kMaxClusterGpus), "rollout expert parallel")
      ("rollout-dp", IntFlag(1, limits::kMaxClusterGpus), "rollout data parallel (default rollout-ep / rollout-tp)")
      ("calibration-file", po::value<std::string>(), "the GPU's calibration table (default: presets/calibration/GPU.json)")
      ("calibration", po::value<std::string>(), "on | off: price from the GPU's calibration table when it has one (default on)")
      ("matmul-efficiency", NumberFlag(0, 1, /*min_open=*/true), "achieved / peak tensor throughput for every product, instead of the calibration table (default 0.55 without one)")
      ("comm-efficiency", NumberFlag(0, 1, /*min_open=*/true), "achieved / peak link bandwidth, instead of the table's collectives (default 0.8 without one)")
      ("dp-overlap", NumberFlag(0, 1), "share of the DP sync hidden under backward (default 0.5)")
      ("moe-imbalance", NumberFlag(1, 1000), "busiest expert rank / mean (default 1.2)");
}

void AddLayerSplitOption(po::options_description& desc) {
  desc.add_options()("layer-split", po::value<std::string>(),
                     "even | megatron[+embedding][+loss] | auto | a Megatron pipeline_model_parallel_layout "
                     "(Et|(tt|)*30mL) | layers per stage (2,3,3,2) (default: auto with --engine verl, the best "
                     "split Megatron builds; even for native)");
}

Result<LayerSplit> LayerSplitFromOptions(const po::variables_map& vm) {
  const std::string engine = vm.count("engine") ? vm["engine"].as<std::string>() : "native";
  if (engine != "native" && engine != "verl")
    return Status::InvalidArgument("--engine: must be native or verl, got \"" + engine + "\"");
  if (vm.count("layer-split")) return ParseLayerSplit(vm["layer-split"].as<std::string>());
  return LayerSplit{engine == "verl" ? LayerSplitKind::kAuto : LayerSplitKind::kEven, {}};
}

namespace {

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
    const std::string targets = vm["lora-targets"].as<std::string>();
    std::stringstream ss(targets);
    std::string t;
    while (std::getline(ss, t, ',')) {
      if (t == "attention") r.lora.attention = true;
      else if (t == "experts") r.lora.routed_experts = true;
      else if (t == "dense") r.lora.dense_ffn = true;
      else return Status::InvalidArgument("--lora-targets: \"" + QuoteBounded(t) + "\" is not one of attention, experts, dense");
    }
    // An empty list (or a trailing comma) would train LoRA with no adapter.
    if (targets.empty() || targets.back() == ',')
      return Status::InvalidArgument("--lora-targets: \"" + QuoteBounded(targets) +
                                     "\" names an empty target; give one or more of attention, experts, dense");
  }
  if (vm.count("lora-native-base")) r.lora.native_base = true;
  if (vm.count("schedule")) {
    KP_ASSIGN_OR_RETURN(r.schedule, ParseSchedule(vm["schedule"].as<std::string>()));
  } else if (vm.count("vp") && vm["vp"].as<int>() > 1) {
    r.schedule = ScheduleKind::kInterleaved1F1B;  // virtual stages are what the interleaved schedule runs
  }
  if (vm.count("optimizer-sync")) {
    KP_ASSIGN_OR_RETURN(r.optimizer_sync, ParseOptimizerSync(vm["optimizer-sync"].as<std::string>()));
  }
  if (vm.count("p2p")) {
    KP_ASSIGN_OR_RETURN(r.send_mode, ParseSendMode(vm["p2p"].as<std::string>()));
  } else if (vm.count("engine") && vm["engine"].as<std::string>() == "verl") {
    r.send_mode = DefaultSendMode(r.schedule, /*megatron=*/true);
  }
  if (vm.count("engine") && vm["engine"].as<std::string>() == "verl")
    r.recipe.expert_activations = ExpertActivations::kMegatron;
  if (vm.count("recompute")) {
    KP_ASSIGN_OR_RETURN(r.recompute, ParseRecompute(vm["recompute"].as<std::string>()));
  }
  if (vm.count("recompute-method")) {
    KP_ASSIGN_OR_RETURN(r.recompute_method, ParseRecomputeMethod(vm["recompute-method"].as<std::string>()));
    if (r.recompute != Recompute::kFull)
      return Status::InvalidArgument("--recompute-method: needs --recompute full");
  }
  if (vm.count("recompute-num-layers")) {
    r.recompute_layers = vm["recompute-num-layers"].as<int>();
    if (r.recompute != Recompute::kFull)
      return Status::InvalidArgument("--recompute-num-layers: needs --recompute full");
  }
  KP_ASSIGN_OR_RETURN(r.sequence_parallel, OnOff(vm, "sequence-parallel", r.sequence_parallel));
  KP_ASSIGN_OR_RETURN(r.distributed_optimizer, OnOff(vm, "distributed-optimizer", r.distributed_optimizer));
  KP_ASSIGN_OR_RETURN(r.flash_attention, OnOff(vm, "flash-attention", r.flash_attention));
  if (vm.count("dtype")) {
    KP_ASSIGN_OR_RETURN(const PrecisionChoice precision, ParsePrecision(vm["dtype"].as<std::string>(), r.gpu));
    r.bf16 = precision.bf16;
    r.recipe.fp8 = precision.fp8;
  }
  KP_ASSIGN_OR_RETURN(r.recipe.fp8_param_gather, OnOff(vm, "fp8-param-gather", r.recipe.fp8_param_gather));
  if (vm.count("optimizer-moments")) {
    KP_ASSIGN_OR_RETURN(r.recipe.moments, ParseMomentsDtype(vm["optimizer-moments"].as<std::string>()));
  }
  if (vm.count("recompute-modules")) {
    KP_ASSIGN_OR_RETURN(r.recipe.recompute_modules, ParseRecomputeModules(vm["recompute-modules"].as<std::string>()));
  }
  if (vm.count("dispatcher")) {
    KP_ASSIGN_OR_RETURN(r.recipe.dispatcher, ParseDispatcher(vm["dispatcher"].as<std::string>()));
  }
  KP_ASSIGN_OR_RETURN(r.recipe.a2a_overlap, OnOff(vm, "a2a-overlap", r.recipe.a2a_overlap));
  if (vm.count("cuda-graphs")) {
    KP_ASSIGN_OR_RETURN(r.recipe.cuda_graphs, ParseCudaGraphs(vm["cuda-graphs"].as<std::string>(), "--cuda-graphs"));
  }
  KP_ASSIGN_OR_RETURN(r.recipe.grad_reduce_in_fp32, OnOff(vm, "grad-reduce-in-fp32", r.recipe.grad_reduce_in_fp32));
  if (vm.count("state-precision")) {
    const std::string s = vm["state-precision"].as<std::string>();
    if (s != "mixed" && s != "fp32")
      return Status::InvalidArgument("--state-precision: must be mixed or fp32, got \"" + s + "\"");
    r.state_precision = s == "fp32" ? StatePrecision::kFp32 : StatePrecision::kMixed;
  }
  if (vm.count("placement")) {
    const std::string p = vm["placement"].as<std::string>();
    if (p == "colocated") r.placement = Placement::kColocated;
    else if (p == "split") r.placement = Placement::kSplit;
    else return Status::InvalidArgument("--placement: must be colocated or split, got \"" + p + "\"");
  }
  return Status::Ok();
}

// A flag whose value only matters under another setting is refused without
// it, rather than accepted and silently ignored.
Status CheckPreconditions(const po::variables_map& vm, const PlanRequest& r) {
  const bool lora = r.mode == TrainMode::kLora;
  for (const char* flag : {"lora-rank", "lora-alpha", "lora-experts", "lora-targets", "lora-native-base"})
    KP_RETURN_IF_ERROR(FlagNeeds(vm, flag, lora, "--mode lora (the plan trains full weights)"));
  KP_RETURN_IF_ERROR(FlagNeeds(vm, "rollout-gpus", r.placement == Placement::kSplit, "--placement split"));
  KP_RETURN_IF_ERROR(
      FlagNeeds(vm, "gpu-memory-utilization", r.placement == Placement::kColocated, "--placement colocated"));
  KP_RETURN_IF_ERROR(FlagNeeds(vm, "recompute-modules", r.recompute == Recompute::kSelective, "--recompute selective"));
  KP_RETURN_IF_ERROR(FlagNeeds(vm, "fp8-param-gather", r.recipe.fp8 != Fp8Recipe::kNone,
                               "an FP8 --dtype (fp8-tensorwise, fp8-blockwise, mxfp8)"));
  for (const char* flag : {"dispatcher", "a2a-overlap", "cuda-graphs"})
    KP_RETURN_IF_ERROR(FlagNeeds(vm, flag, r.model.is_moe(), "an MoE model (" + r.model.name + " is dense)"));
  // Megatron's state knobs price the full fine-tune's mixed-precision states;
  // LoRA's adapters and the native fp32 states keep their own.
  const bool megatron_states = r.mode == TrainMode::kFull && r.state_precision == StatePrecision::kMixed;
  for (const char* flag : {"optimizer-moments", "fp8-param-gather", "grad-reduce-in-fp32"})
    KP_RETURN_IF_ERROR(FlagNeeds(vm, flag, megatron_states, "full fine-tuning with --state-precision mixed"));
  KP_RETURN_IF_ERROR(FlagNeeds(vm, "grad-reduce-in-fp32", r.bf16, "--dtype bf16 or an FP8 recipe (fp16 gradients stay fp16)"));
  for (const char* flag : {"prompt-length", "response-length"})
    if (vm.count(flag) && vm.count("seq-len"))
      return Status::InvalidArgument(std::string("--") + flag + ": give --seq-len (prompt only) or --prompt-length and "
                                     "--response-length, not both");
  return Status::Ok();
}

}  // namespace

namespace {

// The table that prices the plan: the user's file, the GPU preset's, or none.
Result<std::shared_ptr<const CalibrationTable>> ResolveCalibration(const po::variables_map& vm,
                                                                   const PresetCatalog& catalog,
                                                                   const std::string& gpu) {
  KP_ASSIGN_OR_RETURN(const bool use, OnOff(vm, "calibration", true));
  if (!use) {
    if (vm.count("calibration-file"))
      return Status::InvalidArgument("--calibration-file: cannot be combined with --calibration off");
    return std::shared_ptr<const CalibrationTable>();
  }
  if (vm.count("calibration-file")) return catalog.CalibrationFile(vm["calibration-file"].as<std::string>());
  return catalog.Calibration(gpu);
}

}  // namespace

Result<PlanRequest> BuildPlanRequest(const po::variables_map& vm, const CliEnv& env, std::string* preset) {
  PlanRequest r;
  TopologySpec topo;
  bool have_topo = false;
  std::string topo_source;  // what an error in the topology's model or GPU names
  PresetCatalog catalog(env.fs, env.data.presets);
  if (vm.count("preset") && vm.count("topology-file"))
    return Status::InvalidArgument("--preset: give --preset or --topology-file, not both");
  if (vm.count("preset")) {
    KP_ASSIGN_OR_RETURN(topo, catalog.Topology(vm["preset"].as<std::string>()));
    have_topo = true;
    *preset = topo.name;
    topo_source = "--preset " + topo.name + ": ";
  } else if (vm.count("topology-file")) {
    KP_ASSIGN_OR_RETURN(topo, catalog.TopologyFile(vm["topology-file"].as<std::string>()));
    have_topo = true;
    *preset = topo.name;
    topo_source = "--topology-file " + vm["topology-file"].as<std::string>() + ": ";
  }
  KP_ASSIGN_OR_RETURN(r.model, ResolveModel(vm, env, have_topo ? topo.model : "", topo_source + "model"));
  KP_ASSIGN_OR_RETURN(r.gpu, ResolveGpu(vm, env, have_topo ? topo.gpu : "", topo_source + "gpu"));
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
    // What the topology gave and no flag replaced: errors name the file's field.
    const std::pair<const char*, const char*> fields[] = {
        {"nodes", "nodes"},         {"gpus-per-node", "gpus_per_node"}, {"mode", "mode"},
        {"lora-rank", "lora_rank"}, {"tp", "actor.tp"},                 {"pp", "actor.pp"},
        {"ep", "actor.ep"},         {"etp", "actor.etp"},               {"cp", "actor.cp"},
        {"dp", "actor.dp"},         {"rollout-tp", "rollout.tp"},       {"rollout-ep", "rollout.ep"},
        {"rollout-n", "rollout.n"}, {"prompt-length", "lengths.prompt"}, {"response-length", "lengths.response"}};
    for (const auto& [flag, field] : fields)
      if (!vm.count(flag)) r.value_sources[std::string("--") + flag] = topo_source + field;
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
  Override(vm, "matmul-efficiency", &r.efficiency.matmul);
  Override(vm, "comm-efficiency", &r.efficiency.comm);
  r.efficiency.gemm_from_table = !vm.count("matmul-efficiency");
  r.efficiency.comm_from_table = !vm.count("comm-efficiency");
  KP_ASSIGN_OR_RETURN(r.calibration, ResolveCalibration(vm, catalog, r.gpu.name));
  if (vm.count("grad-bucket-mib")) r.gradient_bucket = Bytes(vm["grad-bucket-mib"].as<double>() * (1 << 20));
  if (vm.count("activation-profile")) {
    const std::string path = vm["activation-profile"].as<std::string>();
    Result<std::string> text = env.fs.ReadFile(path, limits::kMaxSpecFileBytes);
    if (!text.ok()) return text.status().WithContext("--activation-profile");
    Result<ActivationProfile> profile = ParseActivationProfile(*text);
    if (!profile.ok()) return Status::InvalidArgument("--activation-profile: " + path + ": " + profile.status().message());
    r.activation_profile = std::make_shared<const ActivationProfile>(std::move(*profile));
  }
  Override(vm, "dp-overlap", &r.efficiency.dp_overlap);
  Override(vm, "moe-imbalance", &r.efficiency.moe_imbalance);
  KP_RETURN_IF_ERROR(ApplyChoices(vm, r));
  KP_RETURN_IF_ERROR(CheckPreconditions(vm, r));
  KP_ASSIGN_OR_RETURN(r.layer_split, LayerSplitFromOptions(vm));
  ParallelPlan& p = r.plan;
  Override(vm, "tp", &p.tp); Override(vm, "pp", &p.pp); Override(vm, "vp", &p.vp);
  Override(vm, "ep", &p.ep); Override(vm, "etp", &p.etp); Override(vm, "cp", &p.cp);
  Override(vm, "rollout-tp", &p.rollout_tp); Override(vm, "rollout-ep", &p.rollout_ep);
  if (Status s = ValidateRequest(r); !s.ok()) return Status::InvalidArgument(WithValueSource(r, s.message()));
  // dp and rollout dp follow from the others unless given.
  // Each factor is at most 2^20 (IntFlag), so the product fits in 64 bits.
  const std::int64_t denom = std::int64_t{p.tp} * p.pp * p.cp;
  p.dp = r.actor_gpus() % denom == 0 ? static_cast<int>(r.actor_gpus() / denom) : 0;
  Override(vm, "dp", &p.dp);
  if (!vm.count("search") && p.dp <= 0)
    return Status::InvalidArgument(WithValueSource(r, "--dp: tp x pp x cp = " + std::to_string(denom) +
                                                          " does not divide the " + std::to_string(r.actor_gpus()) +
                                                          " actor GPUs"));
  p.rollout_dp = p.rollout_tp > 0 && p.rollout_ep % p.rollout_tp == 0 && p.rollout_ep > p.rollout_tp
                     ? p.rollout_ep / p.rollout_tp : 1;
  Override(vm, "rollout-dp", &p.rollout_dp);
  return r;
}

Result<RecordedPlan> ReadRecordedPlan(const std::string& db, std::int64_t id, const CliEnv& env) {
  if (!env.fs.Exists(db)) return Status::InvalidArgument("--db: " + db + " does not exist (needed by --plan)");
  KP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(db, env.clock, StoreMode::kRead));
  RecordedPlan out;
  KP_ASSIGN_OR_RETURN(out.record, store->GetPlan(id));
  Result<PlanRequest> req = Status::Internal("unparsed");
  try {
    req = RequestFromJson(nlohmann::json::parse(out.record.request_json));
  } catch (const std::exception& e) {
    return Status::InvalidArgument("--plan: plan " + std::to_string(id) + " has an unreadable request: " + e.what());
  }
  if (!req.ok()) return Status::InvalidArgument("--plan: " + req.status().message());
  out.request = std::move(*req);
  return out;
}

}  // namespace kp
