// The options that describe a plan request, shared by `plan` and
// `simulate`: a preset or a topology file, the model, the GPU, the cluster,
// the workload and the parallel layout.
#include "cli/plan_options.h"

#include <optional>

#include "common/limits.h"
#include "planner/plan_json.h"
#include "planner/plan_request_builder.h"
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

namespace {

template <typename T>
std::optional<T> Given(const po::variables_map& vm, const char* name) {
  if (!vm.count(name)) return std::nullopt;
  return vm[name].as<T>();
}

std::optional<std::string> Word(const po::variables_map& vm, const char* name) {
  return Given<std::string>(vm, name);
}

RequestChoices ReadChoices(const po::variables_map& vm) {
  RequestChoices c;
  c.nodes = Given<int>(vm, "nodes");
  c.gpus_per_node = Given<int>(vm, "gpus-per-node");
  c.mode = Word(vm, "mode");
  c.lora_rank = Given<int>(vm, "lora-rank");
  c.lora_alpha = Given<double>(vm, "lora-alpha");
  c.lora_experts = Word(vm, "lora-experts");
  c.lora_targets = Word(vm, "lora-targets");
  c.lora_native_base = vm.count("lora-native-base") > 0;
  c.prompt_length = Given<int>(vm, "prompt-length");
  c.response_length = Given<int>(vm, "response-length");
  c.seq_len = Given<int>(vm, "seq-len");
  c.global_batch = Given<int>(vm, "global-batch");
  c.micro_batch = Given<int>(vm, "micro-batch");
  c.rollout_n = Given<int>(vm, "rollout-n");
  c.schedule = Word(vm, "schedule");
  c.optimizer_sync = Word(vm, "optimizer-sync");
  c.p2p = Word(vm, "p2p");
  c.engine = Word(vm, "engine");
  c.layer_split = Word(vm, "layer-split");
  c.recompute = Word(vm, "recompute");
  c.recompute_method = Word(vm, "recompute-method");
  c.recompute_num_layers = Given<int>(vm, "recompute-num-layers");
  c.sequence_parallel = Word(vm, "sequence-parallel");
  c.distributed_optimizer = Word(vm, "distributed-optimizer");
  c.flash_attention = Word(vm, "flash-attention");
  c.dtype = Word(vm, "dtype");
  c.fp8_param_gather = Word(vm, "fp8-param-gather");
  c.optimizer_moments = Word(vm, "optimizer-moments");
  c.grad_reduce_in_fp32 = Word(vm, "grad-reduce-in-fp32");
  c.recompute_modules = Word(vm, "recompute-modules");
  c.dispatcher = Word(vm, "dispatcher");
  c.cuda_graphs = Word(vm, "cuda-graphs");
  c.a2a_overlap = Word(vm, "a2a-overlap");
  c.state_precision = Word(vm, "state-precision");
  c.grad_bucket_mib = Given<double>(vm, "grad-bucket-mib");
  c.placement = Word(vm, "placement");
  c.rollout_gpus = Given<int>(vm, "rollout-gpus");
  c.gpu_memory_utilization = Given<double>(vm, "gpu-memory-utilization");
  c.tp = Given<int>(vm, "tp");
  c.pp = Given<int>(vm, "pp");
  c.vp = Given<int>(vm, "vp");
  c.ep = Given<int>(vm, "ep");
  c.etp = Given<int>(vm, "etp");
  c.cp = Given<int>(vm, "cp");
  c.dp = Given<int>(vm, "dp");
  c.rollout_tp = Given<int>(vm, "rollout-tp");
  c.rollout_ep = Given<int>(vm, "rollout-ep");
  c.rollout_dp = Given<int>(vm, "rollout-dp");
  c.matmul_efficiency = Given<double>(vm, "matmul-efficiency");
  c.comm_efficiency = Given<double>(vm, "comm-efficiency");
  c.dp_overlap = Given<double>(vm, "dp-overlap");
  c.moe_imbalance = Given<double>(vm, "moe-imbalance");
  c.search = vm.count("search") > 0;
  return c;
}

// The seed topology --preset or --topology-file names, if either, with what
// an error about one of its values names.
Status ResolveTopology(const po::variables_map& vm, const PresetCatalog& catalog, RequestInputs& in) {
  if (vm.count("preset") && vm.count("topology-file"))
    return Status::InvalidArgument("--preset: give --preset or --topology-file, not both");
  if (vm.count("preset")) {
    KP_ASSIGN_OR_RETURN(in.topology, catalog.Topology(vm["preset"].as<std::string>()));
    in.topology_source = "--preset " + in.topology->name + ": ";
  } else if (vm.count("topology-file")) {
    const std::string path = vm["topology-file"].as<std::string>();
    KP_ASSIGN_OR_RETURN(in.topology, catalog.TopologyFile(path));
    in.topology_source = "--topology-file " + path + ": ";
  }
  return Status::Ok();
}

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

Result<std::shared_ptr<const ActivationProfile>> ReadActivationProfile(const po::variables_map& vm,
                                                                       const CliEnv& env) {
  if (!vm.count("activation-profile")) return std::shared_ptr<const ActivationProfile>();
  const std::string path = vm["activation-profile"].as<std::string>();
  Result<std::string> text = env.fs.ReadFile(path, limits::kMaxSpecFileBytes);
  if (!text.ok()) return text.status().WithContext("--activation-profile");
  Result<ActivationProfile> profile = ParseActivationProfile(*text);
  if (!profile.ok()) return Status::InvalidArgument("--activation-profile: " + path + ": " + profile.status().message());
  return std::make_shared<const ActivationProfile>(std::move(*profile));
}

// What the options name in files and presets: the topology, the model, the
// GPU, the calibration table and the activation profile.
Result<RequestInputs> ResolveInputs(const po::variables_map& vm, const CliEnv& env) {
  PresetCatalog catalog(env.fs, env.data.presets);
  RequestInputs in;
  KP_RETURN_IF_ERROR(ResolveTopology(vm, catalog, in));
  const std::string& source = in.topology_source;
  KP_ASSIGN_OR_RETURN(in.model, ResolveModel(vm, env, in.topology ? in.topology->model : "", source + "model"));
  KP_ASSIGN_OR_RETURN(in.gpu, ResolveGpu(vm, env, in.topology ? in.topology->gpu : "", source + "gpu"));
  KP_ASSIGN_OR_RETURN(in.calibration, ResolveCalibration(vm, catalog, in.gpu.name));
  KP_ASSIGN_OR_RETURN(in.activation_profile, ReadActivationProfile(vm, env));
  return in;
}

}  // namespace

Result<PlanRequest> BuildPlanRequest(const po::variables_map& vm, const CliEnv& env, std::string* preset) {
  KP_ASSIGN_OR_RETURN(const RequestInputs inputs, ResolveInputs(vm, env));
  if (inputs.topology) *preset = inputs.topology->name;
  return BuildPlanRequest(ReadChoices(vm), inputs);
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
