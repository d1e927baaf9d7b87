// Prices one SDPO step's systems from a plan: rollout generation from a
// roofline of the rollout engine (prefill compute-bound, decode bound by
// reading weights, the experts a batch touches and the KV cache), the
// self-teacher's forward pass, the verifiers, the planner's training step and
// the weight sync. Formulas in docs/simulator.md.
#ifndef KIMI_PLAN_SIMULATOR_LOOP_COSTS_H_
#define KIMI_PLAN_SIMULATOR_LOOP_COSTS_H_

#include "planner/planner.h"
#include "simulator/cluster_graph.h"
#include "simulator/sdpo_loop.h"

namespace kp {

struct LoopCostOptions {
  double verifier_seconds = 0.05;  ///< one sample's verification on one CPU worker
  int verifier_workers = 64;
  int feedback_tokens = 256;       ///< tokens of feedback text the teacher's reprompt adds
  double hbm_efficiency = 0.7;     ///< achieved / peak HBM bandwidth while decoding
  Seconds sync;                    ///< the weight sync's time (simulator/weight_sync.h)
};

struct RolloutEstimate {
  int engines = 0;
  int samples_per_engine = 0;
  int concurrency = 0;      ///< sequences decoded together on one engine
  int waves = 0;
  Seconds prefill;          ///< one wave's prompts
  Seconds decode_step;      ///< one token for `concurrency` sequences
  Seconds total;
};

/// The rollout engine's time for one step's samples.
RolloutEstimate EstimateRollout(const PlanRequest& req, const PlanEvaluation& plan, const ParamCount& pc,
                                double hbm_efficiency);

/// The plan's weight sync per step: the full update (or, under LoRA, the
/// adapters) broadcast from the trainer to every rollout engine, one
/// receiving node per engine, pipelined in buckets over `net`
/// (simulator/weight_sync.h).
Result<Seconds> PlanSyncTime(const PlanRequest& req, const ParallelPlan& plan, Network net);

struct LoopCostBreakdown {
  LoopCosts costs;
  RolloutEstimate rollout;
  double teacher_tokens = 0;
};

/// Every system's time for one step of `plan`. Fails (naming the field) when
/// the plan's rollout engine cannot hold one sequence.
Result<LoopCostBreakdown> EstimateLoopCosts(const PlanRequest& req, const PlanEvaluation& plan,
                                            const ParamCount& pc, const LoopCostOptions& options);

}  // namespace kp

#endif  // KIMI_PLAN_SIMULATOR_LOOP_COSTS_H_
