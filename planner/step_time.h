// The analytical step-time model of the actor's training step: compute from
// FLOPs over peak x efficiency, TP / EP / CP / PP / DP communication from the
// GPU and network spec, and the schedule's bubble. Formulas in
// docs/planner.md.
#ifndef KIMI_PLAN_PLANNER_STEP_TIME_H_
#define KIMI_PLAN_PLANNER_STEP_TIME_H_

#include <memory>
#include <string>
#include <vector>

#include "common/units.h"
#include "planner/memory_model.h"
#include "planner/plan_request.h"
#include "specs/param_count.h"
#include "specs/stage_split.h"

namespace kp {

/// Forward FLOPs of one token through decoder layer `layer` at sequence
/// length `seq`: 2 x the parameters it multiplies by (top_k routed experts
/// times `imbalance`) plus the attention scores (causal: a s (d_qk + d_v);
/// KDA chunked: a (6 d_k d_v + 64 (d_k + d_v))).
double LayerForwardFlopsPerToken(const ModelSpec& m, const LayerParams& p, int layer, int seq, double imbalance);
/// Forward FLOPs per token of the attention-score part only (what selective recompute redoes).
double AttentionCoreFlopsPerToken(const ModelSpec& m, int layer, int seq);
/// 3 x forward FLOPs per token of the whole model (the MFU numerator's convention:
/// no recomputation, no imbalance).
double ModelTrainFlopsPerToken(const ModelSpec& m, const ParamCount& pc, int seq);

/// Share of the large-GEMM throughput a matmul of width n reaches:
/// n / (n + 128). Applied to the routed experts, whose width f / etp shrinks
/// as ETP grows (Kimi K2.6: 0.94 at ETP 1, 0.67 at ETP 8), so a search does
/// not split small experts for free.
double GemmWidthEfficiency(double n);

struct StepTime {
  Seconds compute;        ///< M x (F + B + W) on the critical rank
  Seconds bubble;
  Seconds tp_comm, ep_comm, cp_comm, pp_comm, dp_comm;  ///< exposed parts
  Seconds optimizer;
  Seconds total;
  int microbatches = 0;
  double tokens_per_step = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;
  /// One micro-batch through the critical rank (for the simulator).
  Seconds f, b, w;
  /// A floor on `total` for every recompute setting of the same plan and
  /// micro-batch size that recomputes each layer at least as much as the
  /// request's (LayerRecompute; under none: every setting; under full block
  /// N: block N' >= N and full uniform): total with the bubble of the
  /// pipeline rank whose bubble is least. Recomputation only lengthens each
  /// rank's B, and every schedule's bubble grows with B, so a plan that
  /// recomputes more is at least this slow (equal to `total` when every
  /// rank's bubble is the critical one's).
  Seconds total_floor;
};

/// What prices the step, for the reader: "h200 calibration table (products,
/// memory passes, collectives)", with the constants named where they stand
/// in for a part the table does not cover or an override replaced.
std::string PricingOf(const PlanRequest& req);

/// Remembers what one decoder layer (or the head) costs per micro-batch (its
/// F, B, W and the collectives inside it) across the plans of one search,
/// where requests differ only in the micro-batch size, recompute, schedule,
/// placement and split and plans in their sizes: keyed by the layer's kind
/// (layers alike in attention, MoE and parameter counts share one), tp, cp,
/// ep, etp, the micro-batch size and how the layer is recomputed
/// (LayerRecompute, so block settings share the tables). The step sums the same
/// per-layer prices whether they come from here or not, so a cached
/// evaluation equals an uncached one exactly. Owned by its caller; one per
/// request family, never shared between models, GPUs or workloads.
class StageCostCache {
 public:
  StageCostCache();
  ~StageCostCache();
  StageCostCache(const StageCostCache&) = delete;
  StageCostCache& operator=(const StageCostCache&) = delete;
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// The DP gradient sync and the optimizer step (EstimateStepTime's dp_comm
/// and optimizer) on the rank with the most parameters, from the ranks'
/// parameters (ParamsOfRanks): no micro-batch size or recompute setting
/// changes them.
struct SyncTerms {
  Seconds dp_comm, optimizer;
};
SyncTerms SyncTermsOf(const PlanRequest& req, const ParallelPlan& p, const std::vector<RankParams>& ranks);
/// dp_comm + optimizer as a floor on the step's total (StepTimeFloorOfLayout).
Seconds SyncFloor(const SyncTerms& sync);

/// The step's time; `cache` (optional) remembers stage costs between calls;
/// `sync` (optional) is the plan's SyncTermsOf when the caller has it;
/// `ranks` (optional) the pipeline ranks to price, DistinctRanks of the
/// plan (the same result as all of them, to the bit, in less time).
StepTime EstimateStepTime(const PlanRequest& req, const ParallelPlan& p, const StageSplit& split,
                          const ParamCount& pc, StageCostCache* cache = nullptr, const SyncTerms* sync = nullptr,
                          const std::vector<int>* ranks = nullptr);

/// The pipeline ranks of `p` under req's schedule with `split`, ascending,
/// less every rank whose stages hold the same kinds of layers in the same
/// order (and the same MTP layers and head) as a lower one: ranks alike
/// cost alike, to the bit. All of them when req prices from measured
/// per-layer times. `cache` supplies the kinds of layers.
std::vector<int> DistinctRanks(const PlanRequest& req, const ParallelPlan& p, const StageSplit& split,
                               const ParamCount& pc, StageCostCache& cache);

/// The work of one micro-batch of req.micro_batch sequences through every
/// decoder layer and the head without recomputation: F + B + W and the TP,
/// EP and CP collectives inside them (the per-layer prices EstimateStepTime
/// sums, from `cache` when given; the EP exchange as exposed under
/// --a2a-overlap), over the whole model. The critical
/// pipeline rank does at least a pp-th of it per micro-batch and every
/// recompute setting adds to it, so whatever the schedule, split and
/// recompute setting, EstimateStepTime's total at this micro-batch size is
/// at least ModelWork x micro-batches / pp + StepTimeFloorOfLayout (up to
/// rounding: shave a floor built from it).
Seconds ModelWork(const PlanRequest& req, const ParallelPlan& p, const ParamCount& pc,
                  StageCostCache* cache = nullptr);

/// The gradient sync and optimizer terms of EstimateStepTime (dp_comm +
/// optimizer), which no micro-batch size or recompute setting changes and
/// every other term adds to: a floor on its total for every micro-batch
/// size and recompute setting of the plan.
Seconds StepTimeFloorOfLayout(const PlanRequest& req, const ParallelPlan& p, const StageSplit& split,
                              const ParamCount& pc);
/// The same from the ranks' parameters (ParamsOfRanks of a plan that
/// differs from `p` at most in dp and cp).
Seconds StepTimeFloorOfLayout(const PlanRequest& req, const ParallelPlan& p, const std::vector<RankParams>& ranks);

}  // namespace kp

#endif  // KIMI_PLAN_PLANNER_STEP_TIME_H_
