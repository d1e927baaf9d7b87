#include "planner/plan_request_builder.h"

#include <cstdint>
#include <initializer_list>
#include <sstream>

#include "common/flag_values.h"
#include "common/text.h"
#include "planner/constraints.h"

namespace kp {

namespace {

template <typename T>
void Override(const std::optional<T>& given, T* field) {
  if (given) *field = *given;
}

// An on/off flag over the value the request already holds.
Status OverrideOnOff(const char* flag, const std::optional<std::string>& given, bool* field) {
  if (!given) return Status::Ok();
  KP_ASSIGN_OR_RETURN(*field, ParseOnOff(flag, *given));
  return Status::Ok();
}

void ApplyTopology(const TopologySpec& topo, const std::string& source, const RequestChoices& c, PlanRequest& r) {
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
  const struct {
    const char* flag;
    const char* field;
    bool given;
  } fields[] = {
      {"nodes", "nodes", c.nodes.has_value()},
      {"gpus-per-node", "gpus_per_node", c.gpus_per_node.has_value()},
      {"mode", "mode", c.mode.has_value()},
      {"lora-rank", "lora_rank", c.lora_rank.has_value()},
      {"tp", "actor.tp", c.tp.has_value()},
      {"pp", "actor.pp", c.pp.has_value()},
      {"ep", "actor.ep", c.ep.has_value()},
      {"etp", "actor.etp", c.etp.has_value()},
      {"cp", "actor.cp", c.cp.has_value()},
      {"dp", "actor.dp", c.dp.has_value()},
      {"rollout-tp", "rollout.tp", c.rollout_tp.has_value()},
      {"rollout-ep", "rollout.ep", c.rollout_ep.has_value()},
      {"rollout-n", "rollout.n", c.rollout_n.has_value()},
      {"prompt-length", "lengths.prompt", c.prompt_length.has_value()},
      {"response-length", "lengths.response", c.response_length.has_value()}};
  for (const auto& f : fields)
    if (!f.given) r.value_sources[std::string("--") + f.flag] = source + f.field;
}

// The numbers the flags give: cluster, LoRA sizes, workload, placement and
// the efficiency factors.
void ApplyNumbers(const RequestChoices& c, PlanRequest& r) {
  Override(c.nodes, &r.nodes);
  Override(c.gpus_per_node, &r.gpus_per_node);
  Override(c.lora_rank, &r.lora.rank);
  r.lora.alpha = 2.0 * r.lora.rank;
  Override(c.lora_alpha, &r.lora.alpha);
  Override(c.prompt_length, &r.prompt_length);
  Override(c.response_length, &r.response_length);
  if (c.seq_len) {
    r.prompt_length = *c.seq_len;
    r.response_length = 0;
  }
  Override(c.global_batch, &r.global_batch);
  Override(c.micro_batch, &r.micro_batch);
  Override(c.rollout_n, &r.rollout_n);
  Override(c.rollout_gpus, &r.rollout_gpus);
  Override(c.gpu_memory_utilization, &r.gpu_memory_utilization);
  Override(c.matmul_efficiency, &r.efficiency.matmul);
  Override(c.comm_efficiency, &r.efficiency.comm);
  r.efficiency.gemm_from_table = !c.matmul_efficiency;
  r.efficiency.comm_from_table = !c.comm_efficiency;
  if (c.grad_bucket_mib) r.gradient_bucket = Bytes(*c.grad_bucket_mib * (1 << 20));
  Override(c.dp_overlap, &r.efficiency.dp_overlap);
  Override(c.moe_imbalance, &r.efficiency.moe_imbalance);
}

Status ApplyLoraTargets(const std::string& targets, LoraOptions& lora) {
  lora.attention = lora.routed_experts = lora.dense_ffn = false;
  std::stringstream ss(targets);
  std::string t;
  while (std::getline(ss, t, ',')) {
    if (t == "attention") lora.attention = true;
    else if (t == "experts") lora.routed_experts = true;
    else if (t == "dense") lora.dense_ffn = true;
    else return Status::InvalidArgument("--lora-targets: \"" + QuoteBounded(t) + "\" is not one of attention, experts, dense");
  }
  // An empty list (or a trailing comma) would train LoRA with no adapter.
  if (targets.empty() || targets.back() == ',')
    return Status::InvalidArgument("--lora-targets: \"" + QuoteBounded(targets) +
                                   "\" names an empty target; give one or more of attention, experts, dense");
  return Status::Ok();
}

Status ApplyLoraChoices(const RequestChoices& c, PlanRequest& r) {
  if (c.mode) {
    KP_ASSIGN_OR_RETURN(r.mode, ParseEither("mode", *c.mode, "full", TrainMode::kFull, "lora", TrainMode::kLora));
  }
  if (c.lora_experts) {
    KP_ASSIGN_OR_RETURN(r.lora.experts, ParseEither("lora-experts", *c.lora_experts, "shared-outer",
                                                    LoraExperts::kSharedOuter, "per-expert", LoraExperts::kPerExpert));
  }
  if (c.lora_targets) KP_RETURN_IF_ERROR(ApplyLoraTargets(*c.lora_targets, r.lora));
  if (c.lora_native_base) r.lora.native_base = true;
  return Status::Ok();
}

bool Verl(const RequestChoices& c) { return c.engine == "verl"; }

Status ApplyScheduleChoices(const RequestChoices& c, PlanRequest& r) {
  if (c.schedule) {
    KP_ASSIGN_OR_RETURN(r.schedule, ParseSchedule(*c.schedule));
  } else if (c.vp.value_or(1) > 1) {
    r.schedule = ScheduleKind::kInterleaved1F1B;  // virtual stages are what the interleaved schedule runs
  }
  if (c.optimizer_sync) {
    KP_ASSIGN_OR_RETURN(r.optimizer_sync, ParseOptimizerSync(*c.optimizer_sync));
  }
  if (c.p2p) {
    KP_ASSIGN_OR_RETURN(r.send_mode, ParseSendMode(*c.p2p));
  } else if (Verl(c)) {
    r.send_mode = DefaultSendMode(r.schedule, /*megatron=*/true);
  }
  if (Verl(c)) r.recipe.expert_activations = ExpertActivations::kMegatron;
  return Status::Ok();
}

Status ApplyRecomputeChoices(const RequestChoices& c, PlanRequest& r) {
  if (c.recompute) {
    KP_ASSIGN_OR_RETURN(r.recompute, ParseRecompute(*c.recompute));
  }
  if (c.recompute_method) {
    KP_ASSIGN_OR_RETURN(r.recompute_method, ParseRecomputeMethod(*c.recompute_method));
    if (r.recompute != Recompute::kFull) return Status::InvalidArgument("--recompute-method: needs --recompute full");
  }
  if (c.recompute_num_layers) {
    r.recompute_layers = *c.recompute_num_layers;
    if (r.recompute != Recompute::kFull) return Status::InvalidArgument("--recompute-num-layers: needs --recompute full");
  }
  return Status::Ok();
}

// Precision, the MoE recipe knobs and the engine's memory switches.
Status ApplyRecipeChoices(const RequestChoices& c, PlanRequest& r) {
  KP_RETURN_IF_ERROR(OverrideOnOff("sequence-parallel", c.sequence_parallel, &r.sequence_parallel));
  KP_RETURN_IF_ERROR(OverrideOnOff("distributed-optimizer", c.distributed_optimizer, &r.distributed_optimizer));
  KP_RETURN_IF_ERROR(OverrideOnOff("flash-attention", c.flash_attention, &r.flash_attention));
  if (c.dtype) {
    KP_ASSIGN_OR_RETURN(const PrecisionChoice precision, ParsePrecision(*c.dtype, r.gpu));
    r.bf16 = precision.bf16;
    r.recipe.fp8 = precision.fp8;
  }
  KP_RETURN_IF_ERROR(OverrideOnOff("fp8-param-gather", c.fp8_param_gather, &r.recipe.fp8_param_gather));
  if (c.optimizer_moments) {
    KP_ASSIGN_OR_RETURN(r.recipe.moments, ParseMomentsDtype(*c.optimizer_moments));
  }
  if (c.recompute_modules) {
    KP_ASSIGN_OR_RETURN(r.recipe.recompute_modules, ParseRecomputeModules(*c.recompute_modules));
  }
  if (c.dispatcher) {
    KP_ASSIGN_OR_RETURN(r.recipe.dispatcher, ParseDispatcher(*c.dispatcher));
  }
  KP_RETURN_IF_ERROR(OverrideOnOff("a2a-overlap", c.a2a_overlap, &r.recipe.a2a_overlap));
  if (c.cuda_graphs) {
    KP_ASSIGN_OR_RETURN(r.recipe.cuda_graphs, ParseCudaGraphs(*c.cuda_graphs, "--cuda-graphs"));
  }
  return OverrideOnOff("grad-reduce-in-fp32", c.grad_reduce_in_fp32, &r.recipe.grad_reduce_in_fp32);
}

Status ApplyChoices(const RequestChoices& c, PlanRequest& r) {
  KP_RETURN_IF_ERROR(ApplyLoraChoices(c, r));
  KP_RETURN_IF_ERROR(ApplyScheduleChoices(c, r));
  KP_RETURN_IF_ERROR(ApplyRecomputeChoices(c, r));
  KP_RETURN_IF_ERROR(ApplyRecipeChoices(c, r));
  if (c.state_precision) {
    KP_ASSIGN_OR_RETURN(r.state_precision, ParseEither("state-precision", *c.state_precision, "mixed",
                                                       StatePrecision::kMixed, "fp32", StatePrecision::kFp32));
  }
  if (c.placement) {
    KP_ASSIGN_OR_RETURN(r.placement, ParseEither("placement", *c.placement, "colocated", Placement::kColocated,
                                                 "split", Placement::kSplit));
  }
  return Status::Ok();
}

struct GivenFlag {
  const char* flag;
  bool given;
};

// FlagNeedsSetting for each of `flags`.
Status AllNeed(std::initializer_list<GivenFlag> flags, bool holds, const std::string& what) {
  for (const GivenFlag& f : flags) KP_RETURN_IF_ERROR(FlagNeedsSetting(f.flag, f.given, holds, what));
  return Status::Ok();
}

// A flag whose value only matters under another setting is refused without
// it, rather than accepted and silently ignored.
Status CheckPreconditions(const RequestChoices& c, const PlanRequest& r) {
  KP_RETURN_IF_ERROR(AllNeed({{"lora-rank", c.lora_rank.has_value()},
                              {"lora-alpha", c.lora_alpha.has_value()},
                              {"lora-experts", c.lora_experts.has_value()},
                              {"lora-targets", c.lora_targets.has_value()},
                              {"lora-native-base", c.lora_native_base}},
                             r.mode == TrainMode::kLora, "--mode lora (the plan trains full weights)"));
  KP_RETURN_IF_ERROR(FlagNeedsSetting("rollout-gpus", c.rollout_gpus.has_value(), r.placement == Placement::kSplit,
                                      "--placement split"));
  KP_RETURN_IF_ERROR(FlagNeedsSetting("gpu-memory-utilization", c.gpu_memory_utilization.has_value(),
                                      r.placement == Placement::kColocated, "--placement colocated"));
  KP_RETURN_IF_ERROR(FlagNeedsSetting("recompute-modules", c.recompute_modules.has_value(),
                                      r.recompute == Recompute::kSelective, "--recompute selective"));
  KP_RETURN_IF_ERROR(FlagNeedsSetting("fp8-param-gather", c.fp8_param_gather.has_value(),
                                      r.recipe.fp8 != Fp8Recipe::kNone,
                                      "an FP8 --dtype (fp8-tensorwise, fp8-blockwise, mxfp8)"));
  KP_RETURN_IF_ERROR(AllNeed({{"dispatcher", c.dispatcher.has_value()},
                              {"a2a-overlap", c.a2a_overlap.has_value()},
                              {"cuda-graphs", c.cuda_graphs.has_value()}},
                             r.model.is_moe(), "an MoE model (" + r.model.name + " is dense)"));
  // Megatron's state knobs price the full fine-tune's mixed-precision states;
  // LoRA's adapters and the native fp32 states keep their own.
  KP_RETURN_IF_ERROR(AllNeed({{"optimizer-moments", c.optimizer_moments.has_value()},
                              {"fp8-param-gather", c.fp8_param_gather.has_value()},
                              {"grad-reduce-in-fp32", c.grad_reduce_in_fp32.has_value()}},
                             r.mode == TrainMode::kFull && r.state_precision == StatePrecision::kMixed,
                             "full fine-tuning with --state-precision mixed"));
  KP_RETURN_IF_ERROR(FlagNeedsSetting("grad-reduce-in-fp32", c.grad_reduce_in_fp32.has_value(), r.bf16,
                                      "--dtype bf16 or an FP8 recipe (fp16 gradients stay fp16)"));
  const char* length_flag = c.prompt_length ? "--prompt-length" : c.response_length ? "--response-length" : nullptr;
  if (c.seq_len && length_flag)
    return Status::InvalidArgument(std::string(length_flag) + ": give --seq-len (prompt only) or --prompt-length and "
                                   "--response-length, not both");
  return Status::Ok();
}

Result<LayerSplit> LayerSplitFromChoices(const RequestChoices& c) {
  const std::string engine = c.engine.value_or("native");
  if (engine != "native" && engine != "verl")
    return Status::InvalidArgument("--engine: must be native or verl, got \"" + engine + "\"");
  if (c.layer_split) return ParseLayerSplit(*c.layer_split);
  return LayerSplit{engine == "verl" ? LayerSplitKind::kAuto : LayerSplitKind::kEven, {}};
}

void ApplyLayout(const RequestChoices& c, ParallelPlan& p) {
  Override(c.tp, &p.tp); Override(c.pp, &p.pp); Override(c.vp, &p.vp);
  Override(c.ep, &p.ep); Override(c.etp, &p.etp); Override(c.cp, &p.cp);
  Override(c.rollout_tp, &p.rollout_tp); Override(c.rollout_ep, &p.rollout_ep);
}

// dp and rollout dp follow from the others unless given.
Status DeriveDataParallel(const RequestChoices& c, PlanRequest& r) {
  ParallelPlan& p = r.plan;
  // Each factor is at most 2^20 (IntFlag), so the product fits in 64 bits.
  const std::int64_t denom = std::int64_t{p.tp} * p.pp * p.cp;
  p.dp = r.actor_gpus() % denom == 0 ? static_cast<int>(r.actor_gpus() / denom) : 0;
  Override(c.dp, &p.dp);
  if (!c.search && p.dp <= 0)
    return Status::InvalidArgument(WithValueSource(r, "--dp: tp x pp x cp = " + std::to_string(denom) +
                                                          " does not divide the " + std::to_string(r.actor_gpus()) +
                                                          " actor GPUs"));
  p.rollout_dp = p.rollout_tp > 0 && p.rollout_ep % p.rollout_tp == 0 && p.rollout_ep > p.rollout_tp
                     ? p.rollout_ep / p.rollout_tp : 1;
  Override(c.rollout_dp, &p.rollout_dp);
  return Status::Ok();
}

}  // namespace

Result<PlanRequest> BuildPlanRequest(const RequestChoices& choices, const RequestInputs& inputs) {
  PlanRequest r;
  r.model = inputs.model;
  r.gpu = inputs.gpu;
  r.nodes = 1;
  r.gpus_per_node = r.gpu.gpus_per_node;
  if (inputs.topology) ApplyTopology(*inputs.topology, inputs.topology_source, choices, r);
  ApplyNumbers(choices, r);
  r.calibration = inputs.calibration;
  r.activation_profile = inputs.activation_profile;
  KP_RETURN_IF_ERROR(ApplyChoices(choices, r));
  KP_RETURN_IF_ERROR(CheckPreconditions(choices, r));
  KP_ASSIGN_OR_RETURN(r.layer_split, LayerSplitFromChoices(choices));
  ApplyLayout(choices, r.plan);
  if (Status s = ValidateRequest(r); !s.ok()) return Status::InvalidArgument(WithValueSource(r, s.message()));
  KP_RETURN_IF_ERROR(DeriveDataParallel(choices, r));
  return r;
}

}  // namespace kp
