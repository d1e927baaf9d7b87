// Memory per GPU for every role of the SDPO loop: the actor trainer, the
// reference / self-teacher and the rollout engine. Formulas and sources are
// in docs/planner.md; each function here is one of them.
#ifndef KIMI_PLAN_PLANNER_MEMORY_MODEL_H_
#define KIMI_PLAN_PLANNER_MEMORY_MODEL_H_

#include <string>
#include <utility>
#include <vector>

#include "common/units.h"
#include "planner/plan_request.h"
#include "specs/param_count.h"
#include "specs/stage_split.h"

namespace kp {

/// One role's memory on its worst rank.
struct RoleMemory {
  Bytes weights, grads, optimizer, activations, other;
  Bytes capacity;          ///< what the role may use on that GPU
  int rank = 0;            ///< the pipeline rank that is worst
  /// Named parts of `other` and `activations` for the readable table.
  std::vector<std::pair<std::string, Bytes>> details;
  Bytes total() const { return weights + grads + optimizer + activations + other; }
  bool fits() const { return total() <= capacity; }
};

/// Peak memory of one GPU in each phase of a colocated loop (Verl's hybrid
/// engine: actor, reference and rollout time-share the same GPUs).
struct PhasePeaks {
  Bytes train, reference, rollout;
};

struct MemoryReport {
  RoleMemory actor, reference, rollout;
  std::vector<Bytes> actor_by_rank;  ///< the actor's total on each pipeline rank, rank 0 first
  PhasePeaks phases;               ///< colocated only
  Bytes rollout_kv_per_sequence;   ///< KV cache of one full-length sequence
  double rollout_concurrency = 0;  ///< full-length sequences the KV budget holds per engine
  std::vector<std::string> violations;
  bool feasible() const { return violations.empty(); }
};

/// Which activation terms a decoder layer stores, per token, in bytes.
/// `replicated` is held whole on every TP rank unless sequence parallelism
/// splits it; `split` is divided over TP; `per_seq_token` multiplies the
/// sequence length (the eager attention scores); `routed` is per routed
/// token copy on an expert rank.
struct LayerActivationTerms {
  double replicated = 0;
  double split = 0;
  double per_seq_token = 0;
  double routed = 0;
  /// Parts of the terms above a recipe drops or shrinks (planner/recipe.h):
  /// what selective recomputation of a module does not keep, and the linear
  /// layers' inputs, kept in FP8 (one byte) under an FP8 recipe.
  double norms = 0;           ///< of replicated: the two norms' outputs (layernorm)
  double mla_up = 0;          ///< of split: MLA's q, k and v (mla_up_proj)
  double mlp = 0;             ///< of split: a dense layer's FFN inside (mlp)
  double shared = 0;          ///< of split: the shared experts' inside (shared_experts)
  double moe_replicated = 0;  ///< of replicated: the router's (moe, with every routed term)
  double routed_act = 0;      ///< of routed: the experts' activation output (moe_act)
  double fp8_replicated = 0, fp8_split = 0, fp8_routed = 0;  ///< bf16 linear inputs
};

LayerActivationTerms LayerActivationTermsOf(const ModelSpec& m, int layer, int etp, bool flash,
                                            ExpertActivations experts = ExpertActivations::kNative);

/// Activation bytes one decoder layer stores for one micro-batch on one
/// rank. For a GPT-style layer with dropout and eager attention this is
/// Korthikanti et al. (2022), Table 2: sbh(34 + 5as/h) without
/// parallelism, sbh(10 + 24/t + 5as/(ht)) with TP, sbh/t (34 + 5as/h) with
/// TP and SP, 34 sbh/t selective, 2sbh (/t with SP) full recompute.
/// Under selective recomputation with `recipe`'s modules, each module's part
/// is left out; under its FP8 recipe the linear inputs take one byte.
Bytes LayerActivationBytes(const ModelSpec& m, int layer, int seq, int micro_batch,
                           const ParallelPlan& p, bool sequence_parallel, Recompute r,
                           bool flash, double moe_imbalance, const RecipeOptions& recipe = {});

/// One decoder layer's activation bytes for one micro-batch of `req` on a
/// rank of `p` under req.recompute: LayerActivationBytes, or, with
/// req.activation_profile, that layer's measured bytes per token times the
/// micro-batch's tokens, shrunk as LayerActivationBytes shrinks from one
/// rank without recomputation to `p` and req's setting, plus its measured
/// fixed bytes times the share of the layer's parameters a rank of `p`
/// holds (none under full recomputation).
Bytes LayerActivationBytesOf(const PlanRequest& req, const ParallelPlan& p, int layer);

/// What one micro-batch leaves stored in one stage (a pipeline chunk)
/// between its forward and its backward under req's recompute setting: per
/// layer LayerActivationBytes of LayerRecompute's setting (full block N: the
/// first N layers' inputs, every activation of the rest), except that
/// full uniform N keeps only the input of each group of N layers; plus the
/// attention-residual stack columns (AttnResStackColumns).
Bytes StageActivationBytes(const PlanRequest& req, const ParallelPlan& p, const StageLayers& stage);

/// What recomputation materialises at once in a backward on the rank
/// holding `stages`, beyond the chunk: the largest recomputed group (uniform
/// N: N consecutive layers of a chunk, the last group of a chunk possibly
/// shorter) or layer (block), with every activation (Recompute::kNone),
/// less what the chunk's later layers kept and the backward has freed by
/// then (block: the layers from N on, kept whole). Selective
/// recomputation: the largest layer's recomputed modules with every
/// activation, less what the later layers of the chunk kept. Zero without
/// recomputation. Counted once per rank, beside its in-flight chunks.
Bytes RecomputeWorkingSet(const PlanRequest& req, const ParallelPlan& p, const StageSplit& split,
                          const std::vector<int>& stages);

/// The stage indices rank `rank` holds: rank + k*pp for loop schedules,
/// {rank, 2pp-1-rank} for V-shaped ones.
std::vector<int> StagesOfRank(ScheduleKind kind, int pp, int stages_per_rank, int rank);
/// StagesOfRank(kind, pp, stages_per_rank, rank)[k], without the list.
int StageOfRank(ScheduleKind kind, int pp, int rank, int k);

/// Attention-residual stack columns a stage stores for one micro-batch:
/// the stack it receives plus every stack a block start inside it creates.
int AttnResStackColumns(const ModelSpec& m, const StageLayers& stage);

/// Parameters one rank holds for the given stages, by how they shard.
struct RankParams {
  double dense = 0;    ///< TP-sharded or replicated; the optimizer shards it over DP x CP
  double expert = 0;   ///< routed experts; the optimizer shards them over expert-DP
  double lora_dense = 0, lora_expert = 0;  ///< LoRA adapters of the same two kinds
};
RankParams ParamsOfRank(const PlanRequest& req, const ParallelPlan& p, const StageSplit& split,
                        const ParamCount& pc, const std::vector<int>& stages);

/// The parameters of the given stages before TP and EP cut them: what
/// ParamsOfRank divides (so that a search can keep them across layouts that
/// differ in tp, ep and etp only, and get ParamsOfRank's values exactly).
struct RankParamSums {
  double tp_sharded = 0;   ///< cut by tp: attention by heads, dense FFN, shared experts, embedding, head
  double replicated = 0;   ///< on every TP rank: router, norms, latents, attention_replicated
  double expert = 0;       ///< routed experts, cut by ep x etp
  double lora_tp_sharded = 0, lora_expert = 0;
};
RankParamSums ParamSumsOfRank(const PlanRequest& req, const StageSplit& split, const ParamCount& pc,
                              const std::vector<int>& stages);
/// One decoder layer's parameters by how they shard (no LoRA).
RankParamSums LayerParamSums(const LayerParams& layer);
/// ParamsOfRank from the sums: tp_sharded / tp + replicated, expert / (ep etp).
RankParams ShardParams(const RankParamSums& sums, const ParallelPlan& p);

/// ParamsOfRank of every pipeline rank, rank 0 first, each for the stages
/// req.schedule gives it (StagesOfRank). They depend on the plan's tp, pp,
/// vp, ep and etp, not on its dp or cp.
std::vector<RankParams> ParamsOfRanks(const PlanRequest& req, const ParallelPlan& p, const StageSplit& split,
                                      const ParamCount& pc);

/// LoRA adapter parameters over the whole model (before any sharding).
double LoraParams(const ModelSpec& m, const LoraOptions& lora);

/// Bytes one routed-expert parameter takes in the model's storage format:
/// bits / 8, plus a bf16 scale per quantisation group when below 16 bits
/// (Kimi K2.6's INT4 with group 32: 0.5 + 2/32 = 0.5625).
double ExpertBytesPerParam(const ModelSpec& m);

/// A floor on EstimateMemory(...).actor.total() for every micro-batch size
/// and recompute setting (req.micro_batch and req.recompute are ignored):
/// the worst pipeline rank's weights, gradients and optimizer states plus
/// the CUDA/NCCL reserve, the terms neither setting changes. The search
/// prunes a layout whose floor exceeds the GPU.
Bytes ActorMemoryFloor(const PlanRequest& req, const ParallelPlan& plan, const StageSplit& split,
                       const ParamCount& params);
/// The same from the ranks' parameters (ParamsOfRanks of a plan that
/// differs from `plan` at most in dp and cp), without visiting the layers.
Bytes ActorMemoryFloor(const PlanRequest& req, const ParallelPlan& plan, const std::vector<RankParams>& ranks);

/// A ceiling on the GPU memory a plan leaves at its peak (the GPU less the
/// largest colocated phase, or less actor + reference when split), for
/// every micro-batch size and recompute setting, from the ranks' parameters
/// as above: the GPU less ActorMemoryFloor and the reference's weights (the
/// heaviest rank's), and colocated less the least rank's states, those
/// weights and the rollout's share. Below zero: no setting fits.
Bytes HeadroomCeiling(const PlanRequest& req, const ParallelPlan& plan, const std::vector<RankParams>& ranks);

/// The full report. `split` is the pipeline split the actor uses; `ranks`
/// (optional) are the plan's ParamsOfRanks when the caller has them.
MemoryReport EstimateMemory(const PlanRequest& req, const ParallelPlan& plan, const StageSplit& split,
                            const ParamCount& params, const std::vector<RankParams>* ranks = nullptr);

}  // namespace kp

#endif  // KIMI_PLAN_PLANNER_MEMORY_MODEL_H_
