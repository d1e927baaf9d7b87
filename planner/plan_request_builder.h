// A PlanRequest from what the user chose: the flags of `plan`, `simulate`
// and `launch` as plain values (RequestChoices) over what the caller has
// already read from files (RequestInputs: the topology, the model, the GPU,
// the calibration table, the activation profile). Choices are parsed,
// checked against each other, laid over the topology's values, validated,
// and dp and rollout dp derived. No command-line parser, no filesystem.
//
// Every error is one line naming the flag ("--mode: must be full or lora,
// got \"x\""), or the topology's field for a value the topology gave.
#ifndef KIMI_PLAN_PLANNER_PLAN_REQUEST_BUILDER_H_
#define KIMI_PLAN_PLANNER_PLAN_REQUEST_BUILDER_H_

#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "planner/plan_request.h"
#include "specs/activation_profile.h"
#include "specs/calibration.h"
#include "specs/gpu_spec.h"
#include "specs/model_spec.h"
#include "specs/topology_spec.h"

namespace kp {

/// What the user gave, each field named for its flag (--lora-rank:
/// lora_rank). Unset: not given, so the topology's value or the default
/// stands, and a check that a flag needs another setting does not fire.
/// Numbers arrive range-checked (the CLI's IntFlag / NumberFlag); words and
/// on/off values arrive raw and are parsed by BuildPlanRequest.
struct RequestChoices {
  std::optional<int> nodes, gpus_per_node;

  std::optional<std::string> mode;  ///< full | lora
  std::optional<int> lora_rank;
  std::optional<double> lora_alpha;
  std::optional<std::string> lora_experts;  ///< shared-outer | per-expert
  std::optional<std::string> lora_targets;  ///< comma list of attention, experts, dense
  bool lora_native_base = false;            ///< a switch: given or not

  std::optional<int> prompt_length, response_length, seq_len;
  std::optional<int> global_batch, micro_batch, rollout_n;

  std::optional<std::string> schedule, optimizer_sync, p2p;
  /// native | verl: verl makes 1f1b's and interleaved-1f1b's sends
  /// blocking, prices the experts' activations as Megatron-LM keeps them,
  /// and defaults the split to auto.
  std::optional<std::string> engine;
  std::optional<std::string> layer_split;
  std::optional<std::string> recompute, recompute_method;
  std::optional<int> recompute_num_layers;

  /// on | off each.
  std::optional<std::string> sequence_parallel, distributed_optimizer, flash_attention;
  std::optional<std::string> fp8_param_gather, grad_reduce_in_fp32, a2a_overlap;
  /// Words of planner/recipe.h (--dtype: bf16, fp16 or an FP8 recipe).
  std::optional<std::string> dtype, optimizer_moments, recompute_modules, dispatcher, cuda_graphs;
  std::optional<std::string> state_precision;  ///< mixed | fp32
  std::optional<double> grad_bucket_mib;

  std::optional<std::string> placement;  ///< colocated | split
  std::optional<int> rollout_gpus;
  std::optional<double> gpu_memory_utilization;

  std::optional<int> tp, pp, vp, ep, etp, cp, dp;
  std::optional<int> rollout_tp, rollout_ep, rollout_dp;

  std::optional<double> matmul_efficiency, comm_efficiency, dp_overlap, moe_imbalance;

  /// The plan searches its layout: a dp that does not divide is no error.
  bool search = false;
};

/// What the caller resolved before building: files read, presets looked up.
struct RequestInputs {
  ModelSpec model;
  GpuSpec gpu;
  /// The seed topology (--preset or --topology-file), if any: its cluster,
  /// mode, lengths and layout are the request's unless a flag replaces them.
  std::optional<TopologySpec> topology;
  /// What an error about a value the topology gave names before its field:
  /// "--preset h200-full: " or "--topology-file t.json: ".
  std::string topology_source;
  /// Null: price from the constant efficiency factors alone.
  std::shared_ptr<const CalibrationTable> calibration;
  /// Null: Megatron-LM's per-layer activation terms.
  std::shared_ptr<const ActivationProfile> activation_profile;
};

/// The request `choices` describe over `inputs`: the topology's values, then
/// the flags over them; validated by ValidateRequest, whose errors name the
/// topology's field where the topology gave the value. Unless given, dp is
/// the actor's GPUs / (tp x pp x cp) and rollout dp is rollout ep / rollout
/// tp when that divides into more than one (else 1); a dp that does not
/// divide is refused unless `choices.search`. vp > 1 without a schedule
/// chooses interleaved-1f1b; engine verl makes the pipeline's sends
/// Megatron-LM's unless --p2p is given, and its expert activations
/// Megatron's. InvalidArgument, one line, on the first of: a word or on/off
/// value not allowed, a flag given without the setting it needs (or
/// --seq-len with --prompt-length or --response-length), an engine or a
/// layer split not allowed, a value ValidateRequest refuses, a dp that does
/// not divide.
Result<PlanRequest> BuildPlanRequest(const RequestChoices& choices, const RequestInputs& inputs);

}  // namespace kp

#endif  // KIMI_PLAN_PLANNER_PLAN_REQUEST_BUILDER_H_
