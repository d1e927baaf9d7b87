#include "simulator/loop_costs.h"

#include <algorithm>
#include <cmath>

#include "planner/step_time.h"
#include "simulator/weight_sync.h"

namespace kp {

namespace {

constexpr double kBf16 = 2;

int CeilDiv(long long a, long long b) { return static_cast<int>((a + b - 1) / b); }

/// Forward FLOPs per token of the whole model at sequence length `seq`.
double ForwardFlopsPerToken(const ModelSpec& m, const ParamCount& pc, int seq) {
  return ModelTrainFlopsPerToken(m, pc, seq) / 3;
}

}  // namespace

RolloutEstimate EstimateRollout(const PlanRequest& req, const PlanEvaluation& plan, const ParamCount& pc,
                                double hbm_efficiency) {
  const ModelSpec& m = req.model;
  const ParallelPlan& p = plan.plan;
  const MemoryReport& mem = plan.memory;
  RolloutEstimate r;
  const int engine_gpus = static_cast<int>(p.rollout_gpus_per_engine());
  r.engines = static_cast<int>(std::max<std::int64_t>(1, req.rollout_pool_gpus() / engine_gpus));
  r.samples_per_engine = CeilDiv(req.sequences(), r.engines);
  r.concurrency = std::max(1, std::min(r.samples_per_engine, static_cast<int>(std::floor(mem.rollout_concurrency))));
  r.waves = CeilDiv(r.samples_per_engine, r.concurrency);

  const double peak = req.gpu.bf16.value() * req.efficiency.matmul * engine_gpus;
  const double c = r.concurrency;
  r.prefill = Seconds(ForwardFlopsPerToken(m, pc, req.prompt_length) * req.prompt_length * c / peak);

  // Decoding reads every non-expert weight, the experts the batch's tokens
  // touch (each token picks top_k of E: 1 - (1 - k/E)^c of them are hit),
  // and each sequence's KV cache (half full on average).
  const double routed = pc.sum.routed_experts;
  const double expert_bytes = mem.rollout.weights.value() - kBf16 * (pc.total - routed) / p.rollout_tp;
  const double touched = m.is_moe() ? 1 - std::pow(1 - double(m.moe.top_k) / m.moe.num_experts, c) : 0;
  const double bytes = mem.rollout.weights.value() - expert_bytes * (1 - touched) +
                       c * mem.rollout_kv_per_sequence.value() / 2;
  const Seconds memory_bound(bytes / (req.gpu.hbm.value() * hbm_efficiency));
  const int mid_length = req.prompt_length + req.response_length / 2;
  const Seconds compute_bound(ForwardFlopsPerToken(m, pc, mid_length) * c / peak);
  r.decode_step = std::max(memory_bound, compute_bound);
  r.total = (r.prefill + r.decode_step * double(req.response_length)) * double(r.waves);
  return r;
}

Result<Seconds> PlanSyncTime(const PlanRequest& req, const ParallelPlan& plan, Network net) {
  const int engines = static_cast<int>(std::max<std::int64_t>(1, req.rollout_pool_gpus() / plan.rollout_gpus_per_engine()));
  SyncRequest s;
  s.bytes = req.mode == TrainMode::kFull ? FullUpdateBytes(req.model) : LoraUpdateBytes(req.model, req.lora);
  s.receivers = engines;
  s.net = net;
  // LoRA updates of a few GB fit one default bucket; smaller buckets keep
  // the chain pipelined.
  s.bucket = req.mode == TrainMode::kFull ? kDefaultSyncBucket : GiB(1);
  // The plan's rollout engines are the receivers: bound the work under the flag that sized them.
  KP_RETURN_IF_ERROR(CheckSyncWork(engines, s.bytes, s.bucket, "--nodes"));
  KP_ASSIGN_OR_RETURN(ClusterGraph cluster, BuildCluster(req.gpu, engines + 1));
  KP_ASSIGN_OR_RETURN(SyncResult r, SimulateSync(cluster, s));
  return ToSeconds(r.total);
}

Result<LoopCostBreakdown> EstimateLoopCosts(const PlanRequest& req, const PlanEvaluation& plan, const ParamCount& pc,
                                            const LoopCostOptions& o) {
  if (o.verifier_seconds < 0) return Status::InvalidArgument("--verifier-s: must be >= 0");
  if (o.verifier_workers <= 0) return Status::InvalidArgument("--verifier-workers: must be a positive integer");
  if (o.feedback_tokens < 0) return Status::InvalidArgument("--feedback-tokens: must be >= 0");
  if (!(o.hbm_efficiency > 0 && o.hbm_efficiency <= 1)) return Status::InvalidArgument("--hbm-efficiency: must be in (0, 1]");
  if (plan.memory.rollout_concurrency < 1)
    return Status::InvalidArgument("--gpu-memory-utilization: the plan's rollout engine cannot hold one " +
                                   std::to_string(req.seq_length()) + "-token sequence in its KV cache; give the "
                                   "rollout more memory (--gpu-memory-utilization, --placement split) or more GPUs "
                                   "per engine (--rollout-tp, --rollout-ep)");
  LoopCostBreakdown b;
  b.rollout = EstimateRollout(req, plan, pc, o.hbm_efficiency);
  const double samples = double(req.sequences());
  const int teacher_length = req.prompt_length + o.feedback_tokens + req.response_length;
  b.teacher_tokens = samples * teacher_length;
  const double actor_peak = req.gpu.bf16.value() * req.efficiency.matmul * req.actor_gpus();
  b.costs.rollout = b.rollout.total;
  b.costs.feedback = Seconds(CeilDiv(req.sequences(), o.verifier_workers) * o.verifier_seconds);
  b.costs.teacher = Seconds(ForwardFlopsPerToken(req.model, pc, teacher_length) * b.teacher_tokens / actor_peak);
  b.costs.train = plan.step.total;
  b.costs.sync = o.sync;
  return b;
}

}  // namespace kp
