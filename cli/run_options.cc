#include "cli/run_options.h"

#include <iomanip>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/plan_options.h"
#include "cli/runtime_options.h"
#include "cli/training_loop.h"
#include "common/limits.h"
#include "launcher/native_run.h"
#include "planner/plan_json.h"
#include "specs/param_count.h"
#include "store/store.h"

namespace kp {

namespace {

using runtime::ParallelLayout;
using runtime::TrainConfig;

// The planner's flags `run` takes as the planner declares them: the model
// and its scaling, the adapters, the schedule and the layout with its
// split. The workload's flags `run` declares itself, with its own
// defaults (a short CPU run, not a cluster's).
std::set<std::string> PlannerFlagsTaken() {
  po::options_description model;
  AddModelOptions(model);
  std::set<std::string> out = {"lora-rank", "lora-alpha", "lora-native-base", "schedule", "sequence-parallel",
                               "tp",        "pp",         "vp",               "ep",       "etp",
                               "cp",        "dp",         "layer-split"};
  for (const auto& o : model.options()) out.insert(o->long_name());
  return out;
}

// Every flag `plan` takes.
po::options_description PlannerFlags() {
  po::options_description desc;
  AddPlanRequestOptions(desc);
  AddLayerSplitOption(desc);
  return desc;
}

// The flags --plan sets: given beside it, one would silently lose.
constexpr const char* kPlanSets[] = {"tp", "pp", "vp", "ep", "etp", "cp", "dp", "schedule", "sequence-parallel",
                                     "layer-split", "batch", "global-batch", "rollout-n", "micro-batch",
                                     "seq-len", "prompt-length", "response-length", "recompute",
                                     "recompute-method", "recompute-num-layers", "recompute-modules",
                                     "distributed-optimizer"};

bool Given(const po::variables_map& vm, const char* name) { return vm.count(name) && !vm[name].defaulted(); }

int IntOr(const po::variables_map& vm, const char* name, int fallback) {
  return vm.count(name) ? vm[name].as<int>() : fallback;
}

// The step's sequences and tokens per sequence from the flags.
Status ReadWorkload(const po::variables_map& vm, TrainConfig& c) {
  if (Given(vm, "batch") && Given(vm, "global-batch"))
    return Status::InvalidArgument("--batch: give --batch (sequences) or --global-batch (prompts, x --rollout-n), "
                                   "not both");
  if (Given(vm, "rollout-n") && !Given(vm, "global-batch"))
    return Status::InvalidArgument("--rollout-n: samples per prompt of --global-batch, which is not given");
  const long long batch = Given(vm, "global-batch")
                              ? 1LL * vm["global-batch"].as<int>() * IntOr(vm, "rollout-n", 1)
                              : IntOr(vm, "batch", 8);
  if (batch > limits::kMaxBatch)
    return Status::InvalidArgument("--global-batch: " + std::to_string(batch) + " sequences (x --rollout-n), more "
                                   "than " + std::to_string(limits::kMaxBatch));
  c.batch = static_cast<int>(batch);
  const bool lengths = Given(vm, "prompt-length") || Given(vm, "response-length");
  if (lengths && Given(vm, "seq-len"))
    return Status::InvalidArgument("--seq-len: give --seq-len or --prompt-length and --response-length, not both");
  c.seq_len = lengths ? IntOr(vm, "prompt-length", 0) + IntOr(vm, "response-length", 0) : IntOr(vm, "seq-len", 64);
  return Status::Ok();
}

// The stages of `rule` for `model` under the layout's schedule: what the
// planner sized, built as is (even, Megatron's rules, counts, a layout).
Status SetSplit(const LayerSplit& rule, const ModelSpec& model, const std::string& source, ParallelLayout& l) {
  if (rule.kind == LayerSplitKind::kAuto)
    return Status::InvalidArgument(source + "layer-split: auto is the planner's choice among rules; give the rule "
                                   "(even, megatron, counts or a layout) or --plan ID of a plan that chose one");
  KP_ASSIGN_OR_RETURN(const ScheduleKind kind, ParseSchedule(l.schedule));
  const int per_rank = StagesPerRank(kind, ScheduleTakesVp(kind) ? l.vp : 1);
  Result<StageSplit> split = SplitLayers(rule, model.layers, l.pp, per_rank, model.mtp_layers);
  // SplitLayers names --layer-split; from a plan, say whose.
  if (!split.ok()) return Status::InvalidArgument(source + split.status().message().substr(2));
  l.split = *split;
  return Status::Ok();
}

// The recomputation of --recompute (none | full) and Megatron's method
// flags, as the planner reads them; what run executes of them is
// CheckpointingOf's (launcher/native_run.h), the same as for a plan.
Result<LayerCheckpointing> FlagCheckpointing(const po::variables_map& vm) {
  PlanRequest r;
  r.recompute = Recompute::kNone;
  if (vm.count("recompute")) {
    KP_ASSIGN_OR_RETURN(r.recompute, ParseRecompute(vm["recompute"].as<std::string>()));
  }
  const bool method_given = vm.count("recompute-method") || vm.count("recompute-num-layers");
  if (r.recompute != Recompute::kFull && method_given)
    return Status::InvalidArgument(std::string("--") + (vm.count("recompute-method") ? "recompute-method" :
                                   "recompute-num-layers") + ": needs --recompute full");
  if (vm.count("recompute-method")) {
    KP_ASSIGN_OR_RETURN(r.recompute_method, ParseRecomputeMethod(vm["recompute-method"].as<std::string>()));
  }
  r.recompute_layers = IntOr(vm, "recompute-num-layers", 1);
  if (vm.count("recompute-modules")) {
    if (r.recompute != Recompute::kSelective)
      return Status::InvalidArgument("--recompute-modules: needs --recompute selective");
    KP_ASSIGN_OR_RETURN(r.recipe.recompute_modules, ParseRecomputeModules(vm["recompute-modules"].as<std::string>()));
  }
  return CheckpointingOf(r);
}

// Megatron's mixed precision: the plan's states, else --state-precision
// (default fp32, the runtime's own).
Result<bool> MixedPrecision(const po::variables_map& vm, const std::optional<PlanRequest>& plan) {
  if (plan) return plan->state_precision == StatePrecision::kMixed;
  const std::string s = vm.count("state-precision") ? vm["state-precision"].as<std::string>() : "fp32";
  if (s != "mixed" && s != "fp32")
    return Status::InvalidArgument("--state-precision: must be fp32 or mixed, got \"" + s + "\"");
  return s == "mixed";
}

}  // namespace

po::options_description RunOptions() {
  po::options_description desc("kimi-plan run [options]\n\n"
                               "Trains over several processes: c10d Gloo on CPU, NCCL on CUDA; pipeline, data,\n"
                               "expert and tensor parallelism, composed (rank = (pp_rank * dp + dp_rank) * tp +\n"
                               "tp_rank). --nproc N starts N local ranks; under srun or Modal each process is one\n"
                               "rank told by RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. It executes\n"
                               "every flag it takes; the planner's other flags are refused. Options");
  desc.add_options()("help,h", "this text")
      ("nproc", IntFlag(1, limits::kMaxLocalRanks), "start this many local ranks (launcher mode; RANK must be unset)")
      ("plan", Int64Flag(1, INT64_MAX),
       "run this recorded plan: its layout, split, schedule, batch, micro-batch and lengths (--model still picks "
       "the model)")
      ("max-params", NumberFlag(1, 1e15)->default_value(2e9), "refuse a layout where a rank builds more parameters (its stages, TP shard and EP x ETP share of the experts)")
      ("batch", IntFlag(1, limits::kMaxBatch), "sequences per step, split evenly over dp (default 8)")
      ("global-batch", IntFlag(1, limits::kMaxBatch), "the planner's prompts per step: --global-batch x --rollout-n sequences")
      ("rollout-n", IntFlag(1, limits::kMaxBatch), "with --global-batch: samples per prompt (default 1)")
      ("micro-batch", IntFlag(1, limits::kMaxBatch),
       "sequences per micro-batch (default: one with a pipeline, a replica's whole share without)")
      ("seq-len", IntFlag(1, limits::kMaxSequence), "tokens per sequence (default 64)")
      ("prompt-length", IntFlag(0, limits::kMaxSequence), "with --response-length: tokens per sequence, their sum")
      ("response-length", IntFlag(0, limits::kMaxSequence), "with --prompt-length: tokens per sequence, their sum")
      ("mode", po::value<std::string>(), "full | lora (lora with --lora-rank)")
      ("dtype", po::value<std::string>(), "fp32 | bf16: the activations (default fp32; with --plan, bf16)")
      ("state-precision", po::value<std::string>(),
       "fp32 | mixed: fp32 weights, gradients and AdamW states (default; with --plan, the plan's), or Megatron's "
       "mixed precision: bf16 weight matrices, fp32 main gradients, fp32 master weights and moments (with --dtype "
       "bf16)")
      ("recompute", po::value<std::string>(),
       "none | full: recompute decoder layers in backward (default none); selective: the modules of "
       "--recompute-modules")
      ("recompute-modules", po::value<std::string>(),
       "with --recompute selective, Megatron's modules recomputed in backward, comma-separated: core_attn (the "
       "default; a fused attention keeps nothing of it, so nothing is redone, as the planner prices it), moe (an "
       "MoE layer's whole MoE block), mlp (a dense layer's MLP), shared_experts (the shared experts); layernorm (the "
       "two norms' outputs), moe_act (each routed expert's SwiGLU product), mla_up_proj (MLA's up-projected, rotated "
       "queries, keys and values): freed once their consumer has saved them, remade before its backward")
      ("distributed-optimizer", po::value<std::string>()->implicit_value("on"),
       "on | off: AdamW's moments sharded over each parameter's data-parallel replicas, the updated parameters "
       "gathered (Megatron's distributed optimizer; default off)")
      ("recompute-method", po::value<std::string>(),
       "with --recompute full: uniform (groups of --recompute-num-layers, each from its first layer's input) | "
       "block (the first --recompute-num-layers of each stage)")
      ("recompute-num-layers", IntFlag(1, limits::kMaxLayers),
       "with --recompute full: block: layers recomputed per stage; uniform: layers per group (default 1)")
      ("experts", IntFlag(1, limits::kMaxExperts), "scale the model: routed experts")
      ("top-k", IntFlag(1, limits::kMaxExperts), "scale the model: experts per token")
      ("attn-res-block", IntFlag(0, limits::kMaxLayers), "scale the model: attention-residual block size")
      ("dense-layers", IntFlag(0, limits::kMaxLayers), "scale the model: leading dense-FFN layers")
      ("attnres-cache", po::value<std::string>()->default_value("off"), "on | off: the cached AttnRes transport (pipelines)")
      ("backend", po::value<std::string>()->default_value("auto"), "auto | gloo | nccl")
      ("timeout-s", IntFlag(1, 86400)->default_value(120), "seconds any rank waits for a peer before failing");
  runtime::TrainConfig defaults;
  defaults.steps = 20;  // `run` is mostly a check that a layout trains across processes
  AddTrainOptions(desc, defaults, /*steps_required=*/false, /*log_every=*/10);
  AddCheckpointOptions(desc);
  const std::set<std::string> taken = PlannerFlagsTaken();
  const po::options_description planner = PlannerFlags();
  for (const auto& o : planner.options())
    if (taken.count(o->long_name())) desc.add(o);
  AddOutputOptions(desc);
  return desc;
}

Status RefuseUnexecutedFlags(const std::vector<std::string>& args, const po::options_description& run) {
  const po::options_description planner = PlannerFlags();
  for (const std::string& a : args) {
    if (a.rfind("--", 0) != 0) continue;
    const std::string name = a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2);
    if (planner.find_nothrow(name, false) && !run.find_nothrow(name, false))
      return Status::InvalidArgument("--" + name + ": a planner setting kimi-plan run does not execute (it would run "
                                     "another plan than the one asked for); run executes the model, mode, layout, "
                                     "split, schedule, batch, micro-batch, lengths, dtype, states and recomputation");
  }
  return Status::Ok();
}

Result<std::optional<PlanRequest>> RunPlan(const po::variables_map& vm, const CliEnv& env) {
  if (!vm.count("plan")) return std::optional<PlanRequest>();
  const std::int64_t id = vm["plan"].as<std::int64_t>();
  for (const char* flag : kPlanSets)
    if (Given(vm, flag))
      return Status::InvalidArgument(std::string("--") + flag + ": --plan " + std::to_string(id) +
                                     " sets it (its layout, split, schedule, batch and lengths); give one or the "
                                     "other");
  KP_ASSIGN_OR_RETURN(RecordedPlan recorded, ReadRecordedPlan(vm["db"].as<std::string>(), id, env));
  PlanRequest req = std::move(recorded.request);
  if (Status s = CheckNativeExecutes(req); !s.ok())
    return Status::InvalidArgument("--plan " + std::to_string(id) + ": " + s.message());
  return std::optional<PlanRequest>(std::move(req));
}

Result<TrainConfig> BuildRunConfig(const po::variables_map& vm, const CliEnv& env,
                                   const std::optional<PlanRequest>& plan) {
  TrainConfig c;
  KP_ASSIGN_OR_RETURN(c.model, ResolveScaledModel(vm, env));
  KP_RETURN_IF_ERROR(ReadTrainOptions(vm, &c));
  if (plan) {
    if (plan->sequences() > limits::kMaxBatch)
      return Status::InvalidArgument("--plan: " + std::to_string(plan->sequences()) + " sequences a step, more than " +
                                     std::to_string(limits::kMaxBatch));
    c.batch = static_cast<int>(plan->sequences());
    c.seq_len = plan->seq_length();
  } else {
    KP_RETURN_IF_ERROR(ReadWorkload(vm, c));
  }
  if (vm.count("lora-rank") && (!vm.count("mode") || vm["mode"].as<std::string>() == "lora")) {
    c.lora.rank = vm["lora-rank"].as<int>();
    c.lora.alpha = vm.count("lora-alpha") ? vm["lora-alpha"].as<double>() : 2.0 * c.lora.rank;
  }
  c.bias_update_rate = c.lora.enabled() ? 0.0 : 1e-3;
  // The frozen base of a LoRA run is stored in bf16, as the planner prices
  // it (and Megatron and Verl keep it); the adapters train in fp32.
  if (c.lora.enabled()) c.options.weight_dtype = runtime::DType::kBf16;
  const bool native_base = vm.count("lora-native-base") > 0 || (plan && plan->mode == TrainMode::kLora && plan->lora.native_base);
  if (native_base && !c.lora.enabled())
    return Status::InvalidArgument("--lora-native-base: the native base is the frozen base of LoRA; give --lora-rank");
  KP_ASSIGN_OR_RETURN(c.options.int4_expert_base, runtime::Int4ExpertBase(c.model, native_base));
  KP_ASSIGN_OR_RETURN(c.options.dtype,
                      runtime::ParseDType(vm.count("dtype") ? vm["dtype"].as<std::string>() : plan ? "bf16" : "fp32"));
  KP_ASSIGN_OR_RETURN(const bool mixed, MixedPrecision(vm, plan));
  if (mixed && !c.lora.enabled()) {
    if (c.options.dtype != runtime::DType::kBf16)
      return Status::InvalidArgument("--state-precision: mixed keeps bf16 weights for bf16 activations; give --dtype "
                                     "bf16 (or --state-precision fp32)");
    c.options.weight_dtype = runtime::DType::kBf16;
  }
  KP_ASSIGN_OR_RETURN(const LayerCheckpointing checkpointing, plan ? CheckpointingOf(*plan) : FlagCheckpointing(vm));
  c.options.activation_checkpointing = checkpointing.enabled;
  c.options.checkpoint_first_layers = checkpointing.first_layers;
  c.options.recompute_moe = checkpointing.moe;
  c.options.recompute_mlp = checkpointing.mlp;
  c.options.recompute_shared_experts = checkpointing.shared_experts;
  c.options.recompute_layernorm = checkpointing.layernorm;
  c.options.recompute_moe_act = checkpointing.moe_act;
  c.options.recompute_mla_up_proj = checkpointing.mla_up_proj;
  c.options.checkpoint_group_layers = checkpointing.group_layers;
  if (plan) {
    c.distributed_optimizer = plan->distributed_optimizer;
  } else {
    KP_ASSIGN_OR_RETURN(c.distributed_optimizer, OnOff(vm, "distributed-optimizer", false));
  }
  KP_RETURN_IF_ERROR(ReadCheckpointFlags(vm, &c));
  KP_RETURN_IF_ERROR(runtime::ValidateTrainConfig(c));
  return c;
}

Result<ParallelLayout> BuildRunLayout(const po::variables_map& vm, int world, const ModelSpec& model,
                                      const std::optional<PlanRequest>& plan) {
  ParallelLayout l;
  KP_ASSIGN_OR_RETURN(l.attnres_cache, OnOff(vm, "attnres-cache", false));
  if (plan) {
    const ParallelPlan& p = plan->plan;
    l.tp = p.tp, l.cp = p.cp, l.etp = p.etp, l.dp = p.dp, l.pp = p.pp, l.vp = p.vp, l.ep = p.ep;
    l.sequence_parallel = plan->sequence_parallel;
    l.schedule = ScheduleName(plan->schedule);
    l.micro_batch = plan->micro_batch;
    KP_RETURN_IF_ERROR(SetSplit(plan->layer_split, model, "--plan " + std::to_string(vm["plan"].as<std::int64_t>()) +
                                                              ": --", l));
    return l;
  }
  l.tp = IntOr(vm, "tp", 1);
  l.cp = IntOr(vm, "cp", 1);
  l.etp = IntOr(vm, "etp", 1);
  l.pp = IntOr(vm, "pp", 1);
  l.vp = IntOr(vm, "vp", 1);
  l.ep = IntOr(vm, "ep", 1);
  const int dp = IntOr(vm, "dp", 0);
  l.dp = dp > 0 ? dp : world / std::max(1, l.pp * l.cp * l.tp);
  if (vm.count("schedule")) l.schedule = vm["schedule"].as<std::string>();
  KP_ASSIGN_OR_RETURN(l.sequence_parallel, OnOff(vm, "sequence-parallel", true));
  l.micro_batch = IntOr(vm, "micro-batch", 0);
  LayerSplit rule;
  if (vm.count("layer-split")) {
    KP_ASSIGN_OR_RETURN(rule, ParseLayerSplit(vm["layer-split"].as<std::string>()));
  }
  KP_RETURN_IF_ERROR(SetSplit(rule, model, "--", l));
  return l;
}

}  // namespace kp

namespace kp {

Status CheckRankShares(const po::variables_map& vm, const runtime::TrainConfig& config,
                       const runtime::ParallelLayout& layout, const CliEnv& env) {
  KP_ASSIGN_OR_RETURN(const std::vector<std::int64_t> counts, runtime::ParametersPerPipelineRank(layout, config));
  const double max_params = vm["max-params"].as<double>();
  double on_host = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    on_host += static_cast<double>(counts[r]) * (layout.world() / layout.pp);
    if (static_cast<double>(counts[r]) <= max_params) continue;
    std::ostringstream o;
    o << std::setprecision(3) << "--max-params: pipeline rank " << r << " builds " << double(counts[r])
      << " parameters of " << config.model.name << "'s " << CountParams(config.model).total << ", more than "
      << max_params << "; split it further (--pp, --tp, --ep, --etp) or scale it with --layers --hidden";
    return Status::InvalidArgument(o.str());
  }
  return CheckTrainMemory(config, on_host, env);
}

}  // namespace kp
