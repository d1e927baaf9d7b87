// What the user asks the planner: the model, the cluster, the workload and
// either a fixed parallel layout or a search. Plain data; Validate() in
// constraints.h checks it against the model and the cluster.
#ifndef KIMI_PLAN_PLANNER_PLAN_REQUEST_H_
#define KIMI_PLAN_PLANNER_PLAN_REQUEST_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "planner/recipe.h"
#include "specs/activation_profile.h"
#include "specs/calibration.h"
#include "specs/gpu_spec.h"
#include "specs/model_spec.h"
#include "specs/schedule_kind.h"
#include "specs/stage_split.h"

namespace kp {

/// The actor's and the rollout engine's parallel sizes.
/// world = tp * pp * cp * dp = etp * ep * edp * pp (Megatron's MoE folding).
struct ParallelPlan {
  int tp = 1, pp = 1, vp = 1, ep = 1, etp = 1, cp = 1, dp = 1;
  int rollout_tp = 1, rollout_ep = 1, rollout_dp = 1;

  /// In 64 bits. Each size is at most limits::kMaxClusterGpus (2^20) once
  /// read; CheckPlan refuses a layout whose product (taken in floating point)
  /// exceeds the cluster before it calls this.
  std::int64_t world() const { return std::int64_t{tp} * pp * cp * dp; }
  /// Expert data parallel size: replicas of each expert shard.
  int edp() const { return static_cast<int>(std::int64_t{tp} * cp * dp / (std::int64_t{ep} * etp)); }
  std::int64_t rollout_gpus_per_engine() const { return std::int64_t{rollout_tp} * rollout_dp; }
  bool operator==(const ParallelPlan&) const = default;
};

enum class TrainMode { kFull, kLora };
enum class LoraExperts { kSharedOuter, kPerExpert };
enum class Recompute { kNone, kSelective, kFull };
/// Which layers full recomputation (Recompute::kFull) redoes, Megatron-LM's
/// --recompute-method with --recompute-num-layers N, per pipeline chunk (a
/// stage; each virtual stage of interleaving and the V schedules):
/// uniform cuts the chunk's layers into groups of N, keeps only each
/// group's input and recomputes every layer (N = 1 is plain full
/// recomputation); block recomputes the chunk's first N layers, keeping
/// their inputs, and keeps every activation of the rest.
enum class RecomputeMethod { kUniform, kBlock };
enum class Placement { kColocated, kSplit };
/// How the actor keeps each trained parameter (full fine-tuning), in bytes
/// per parameter as weights + gradients + optimizer.
enum class StatePrecision {
  kMixed,  ///< Megatron-LM's bf16: bf16 weights, fp32 gradients, fp32 master and two moments (2 + 4 + 12)
  kFp32,   ///< kimi-plan's runtime: fp32 weights that are the masters, fp32 gradients, two fp32 moments (4 + 4 + 8)
};

/// LoRA adapters over a frozen base. The default targets, attention
/// projections and routed experts, are the ones whose sizes reproduce the
/// seed's 9.4 GB (shared-outer) and 41.0 GB (per-expert) at rank 32.
struct LoraOptions {
  int rank = 32;
  double alpha = 64;
  LoraExperts experts = LoraExperts::kSharedOuter;
  bool attention = true;
  bool routed_experts = true;
  bool dense_ffn = false;       ///< dense layers' FFN and the shared experts
  bool native_base = false;     ///< keep the frozen base in the model's storage format (INT4 experts)
};

/// Efficiency factors of the analytical step-time model (docs/planner.md).
struct EfficiencyModel {
  double matmul = 0.55;      ///< achieved / peak dense tensor throughput
  double comm = 0.80;        ///< achieved / peak link bandwidth for collectives
  double dp_overlap = 0.5;   ///< fraction of the DP gradient sync hidden under backward
  double moe_imbalance = 1.2;  ///< busiest expert rank's tokens / the mean
  /// Price matrix products (and the memory-bound passes) from the request's
  /// calibration table; false when `matmul` was given as an override.
  bool gemm_from_table = true;
  /// Price collectives from the table's curves; false when `comm` was given.
  bool comm_from_table = true;
};

struct PlanRequest {
  ModelSpec model;
  GpuSpec gpu;
  int nodes = 1;
  int gpus_per_node = 8;
  TrainMode mode = TrainMode::kFull;
  LoraOptions lora;
  int prompt_length = 2048;
  int response_length = 2048;
  int global_batch = 128;      ///< prompts per step
  int micro_batch = 1;         ///< sequences per micro-batch per DP rank
  int rollout_n = 1;           ///< samples per prompt
  ScheduleKind schedule = ScheduleKind::k1F1B;
  /// How steps meet at the optimizer step; unset: DefaultOptimizerSync(schedule).
  std::optional<OptimizerSync> optimizer_sync;
  /// How pipeline ranks send to each other; unset: async (kimi-plan's runtime).
  std::optional<SendMode> send_mode;
  Recompute recompute = Recompute::kSelective;
  /// With full recompute only (else uniform and 1, as ValidateRequest holds).
  RecomputeMethod recompute_method = RecomputeMethod::kUniform;
  int recompute_layers = 1;    ///< --recompute-num-layers: N of the method
  bool sequence_parallel = true;
  bool distributed_optimizer = true;
  bool bf16 = true;            ///< false: fp16 (same sizes, fp16 peak)
  /// FP8 recipe, optimizer moments, recomputed modules, dispatcher and the
  /// expert all-to-all overlap (planner/recipe.h).
  RecipeOptions recipe;
  bool flash_attention = true; ///< false: eager attention stores the s x s scores
  StatePrecision state_precision = StatePrecision::kMixed;
  /// A copy the engine's gradient reduction (TP partial sums, DP) holds
  /// beside the gradients after the backward: kimi-plan run flattens 25 MiB
  /// buckets (for TP, and for DP without the distributed optimizer, whose
  /// reduce-scatter works in place); 0: Megatron-LM reduces its contiguous
  /// gradient buffer in place.
  Bytes gradient_bucket;
  /// What the engine's layers keep for the backward, measured (kimi-plan
  /// profile); null: Megatron-LM's per-layer terms (LayerActivationBytes).
  std::shared_ptr<const ActivationProfile> activation_profile;
  Placement placement = Placement::kColocated;
  int rollout_gpus = 0;        ///< split placement: GPUs of the rollout pool
  double gpu_memory_utilization = 0.5;  ///< the rollout engine's share (vLLM)
  EfficiencyModel efficiency;
  /// The GPU's calibration table (presets/calibration/GPU.json or
  /// --calibration-file); null: the constant efficiency factors alone.
  std::shared_ptr<const CalibrationTable> calibration;
  ParallelPlan plan;           ///< ignored when search is set
  LayerSplit layer_split;      ///< how the layers go to stages (--layer-split; even: torchtitan's)
  bool search = false;
  int top = 5;                 ///< with search: how many plans to report
  /// Where a value that no flag gave came from, keyed by the flag that would
  /// set it: {"--tp": "--topology-file t.json: actor.tp"}. Errors about the
  /// value name its source (WithValueSource), not a flag the user never gave.
  std::map<std::string, std::string> value_sources;

  /// GPUs in the cluster, in 64 bits so that no flag can wrap it;
  /// ValidateRequest refuses more than limits::kMaxClusterGpus.
  std::int64_t world() const { return std::int64_t{nodes} * gpus_per_node; }
  /// GPUs sharing NVLink: a group spanning at most this many talks over it.
  int nvlink_gpus() const { return std::max(gpus_per_node, gpu.nvlink_gpus()); }
  int seq_length() const { return prompt_length + response_length; }
  /// Sequences trained per step: prompts times samples.
  long long sequences() const { return static_cast<long long>(global_batch) * rollout_n; }
  OptimizerSync step_sync() const { return optimizer_sync.value_or(DefaultOptimizerSync(schedule)); }
  SendMode p2p() const { return send_mode.value_or(SendMode::kAsync); }
  std::int64_t actor_gpus() const { return placement == Placement::kSplit ? world() - rollout_gpus : world(); }
  std::int64_t rollout_pool_gpus() const { return placement == Placement::kSplit ? rollout_gpus : world(); }
};

const char* RecomputeName(Recompute r);
const char* StatePrecisionName(StatePrecision p);
const char* RecomputeMethodName(RecomputeMethod m);
/// RecomputeName's words back; InvalidArgument naming `field` and what is
/// allowed otherwise.
Result<Recompute> ParseRecompute(const std::string& s, const std::string& field = "--recompute");
/// RecomputeMethodName's words back, the same way.
Result<RecomputeMethod> ParseRecomputeMethod(const std::string& s, const std::string& field = "--recompute-method");
/// The setting as one word or phrase: "none", "selective", "full" (uniform
/// groups of one layer), "full uniform N" or "full block N".
std::string RecomputeLabel(Recompute r, RecomputeMethod method, int layers);
/// RecomputeLabel of the request's setting.
std::string RecomputeLabel(const PlanRequest& r);
/// How the layer at `index` of a pipeline chunk (0: the chunk's first) is
/// recomputed in backward: under full, kFull for every layer (uniform) or
/// for the chunk's first recompute_layers (block) and kNone for the rest of
/// block's; otherwise the request's setting.
Recompute LayerRecompute(const PlanRequest& r, int index);
const char* LoraExpertsName(LoraExperts e);

}  // namespace kp

#endif  // KIMI_PLAN_PLANNER_PLAN_REQUEST_H_
