#include "planner/step_time.h"

#include <algorithm>

#include "planner/memory_model.h"
#include "planner/schedule_model.h"

namespace kp {

namespace {
constexpr int kKdaChunk = 64;
// The width at which a GEMM reaches half its large-shape throughput.
constexpr double kGemmHalfWidth = 128;
constexpr double kBf16 = 2, kFp32 = 4;
// Bytes an Adam step moves per parameter: reads master, m, v, grad (fp32),
// writes master, m, v (fp32) and the bf16 weight.
constexpr double kAdamBytesPerParam = 4 * 4 + 3 * 4 + 2;
}  // namespace

double AttentionCoreFlopsPerToken(const ModelSpec& m, int layer, int seq) {
  const double a = m.heads;
  switch (m.attention[layer]) {
    case AttentionKind::kMha: return a * seq * 2.0 * m.head_dim;
    case AttentionKind::kMla:
      return a * seq * double(m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim + m.mla.v_head_dim);
    case AttentionKind::kKda: {
      const double dk = m.kda.head_dim_k, dv = m.kda.head_dim_v;
      return a * (6 * dk * dv + kKdaChunk * (dk + dv));
    }
  }
  return 0;
}

double LayerForwardFlopsPerToken(const ModelSpec& m, const LayerParams& p, int layer, int seq, double imbalance) {
  const double matmul = p.attention + p.dense_ffn + p.shared_experts + p.latent_proj + p.router +
                        p.routed_expert * m.moe.top_k * imbalance;
  return 2 * matmul + AttentionCoreFlopsPerToken(m, layer, seq);
}

double ModelTrainFlopsPerToken(const ModelSpec& m, const ParamCount& pc, int seq) {
  double fwd = 2 * (pc.head > 0 ? pc.head : pc.embedding);  // the LM head's matmul
  for (int l = 0; l < m.layers; ++l) fwd += LayerForwardFlopsPerToken(m, pc.layers[l], l, seq, 1.0);
  return 3 * fwd;
}

double GemmWidthEfficiency(double n) { return n / (n + kGemmHalfWidth); }

namespace {

BytesPerSecond LinkFor(const PlanRequest& req, int group, double comm_eff) {
  const BytesPerSecond bw = group <= req.gpus_per_node ? req.gpu.nvlink : req.gpu.gpu_rdma();
  return bw * comm_eff;
}

/// Ring collective moving (n-1)/n of `bytes` per GPU, `passes` times.
Seconds Ring(double bytes, int n, int passes, BytesPerSecond bw) {
  if (n <= 1) return Seconds(0);
  return Seconds(passes * (n - 1.0) / n * bytes / bw.value());
}

struct ChunkCost {
  Seconds f, b_input, w, tp, ep, cp;
};

ChunkCost CostOfStage(const PlanRequest& req, const ParallelPlan& p, const StageLayers& st, const ParamCount& pc) {
  const ModelSpec& m = req.model;
  const EfficiencyModel& e = req.efficiency;
  const double tokens = double(req.seq_length()) * req.micro_batch / p.cp;
  const FlopsPerSecond peak = (req.bf16 ? req.gpu.bf16 : req.gpu.fp16) * e.matmul;
  double fwd = 0, routed = 0, core = 0;
  for (int l = st.first_layer; l < st.end_layer; ++l) {
    const LayerParams& lp = pc.layers[l];
    const double expert = 2 * lp.routed_expert * m.moe.top_k * e.moe_imbalance;
    fwd += LayerForwardFlopsPerToken(m, lp, l, req.seq_length(), e.moe_imbalance) - expert;
    routed += expert;
    core += AttentionCoreFlopsPerToken(m, l, req.seq_length());
  }
  if (st.head) fwd += 2.0 * (pc.head > 0 ? pc.head : pc.embedding);
  ChunkCost c;
  const double expert_width = m.is_moe() ? double(m.moe.expert_ffn) / p.etp : 1;
  c.f = ComputeTime(Flops(fwd * tokens / p.tp), peak) +
        ComputeTime(Flops(routed * tokens / p.tp), peak * GemmWidthEfficiency(expert_width));
  // A frozen base has no weight gradients: under LoRA only the adapters' W remains.
  c.w = req.mode == TrainMode::kLora ? c.f * (LoraParams(m, req.lora) / pc.total) : c.f;
  c.b_input = c.f;
  if (req.recompute == Recompute::kFull) c.b_input += c.f;
  if (req.recompute == Recompute::kSelective && !req.flash_attention)
    c.b_input += ComputeTime(Flops(core * tokens / p.tp), peak);

  const double hidden_bytes = tokens * m.hidden * kBf16;
  const BytesPerSecond tp_bw = LinkFor(req, p.tp, e.comm);
  const BytesPerSecond ep_bw = LinkFor(req, p.ep * p.etp, e.comm);
  const BytesPerSecond cp_bw = LinkFor(req, p.tp * p.cp, e.comm);
  for (int l = st.first_layer; l < st.end_layer; ++l) {
    // Attention and FFN each end in one all-reduce (or reduce-scatter +
    // all-gather with SP, the same volume) forward and one backward.
    c.tp += Ring(hidden_bytes, p.tp, 2 * 2 * 2, tp_bw);
    if (m.is_moe_layer(l) && p.ep > 1) {
      const double in = m.moe.latent_dim > 0 ? m.moe.latent_dim : m.hidden;
      const double copies = tokens * m.moe.top_k * p.etp / p.tp * e.moe_imbalance;
      // Dispatch and combine, forward and backward.
      c.ep += Seconds(4 * copies * in * kBf16 * (p.ep - 1.0) / p.ep / ep_bw.value());
    }
    if (p.cp > 1 && m.attention[l] != AttentionKind::kKda) {
      const double kv = tokens * m.heads / p.tp *
                        (m.attention[l] == AttentionKind::kMla
                             ? double(m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim + m.mla.v_head_dim)
                             : 2.0 * m.head_dim) * kBf16;
      // Ring attention passes K/V cp-1 times forward and twice that backward;
      // half of it hides under the attention compute.
      c.cp += Seconds(0.5 * 3 * (p.cp - 1) * kv / cp_bw.value());
    }
  }
  return c;
}

}  // namespace

StepTime EstimateStepTime(const PlanRequest& req, const ParallelPlan& p, const StageSplit& split,
                          const ParamCount& pc) {
  const ModelSpec& m = req.model;
  const EfficiencyModel& e = req.efficiency;
  StepTime t;
  t.microbatches = static_cast<int>(req.sequences() / (static_cast<long long>(p.dp) * req.micro_batch));
  t.tokens_per_step = double(req.sequences()) * req.seq_length();
  const int spr = StagesPerRank(req.schedule, p.vp);

  // The critical rank: the one with the most work per micro-batch.
  Seconds f, b, w, tp, ep, cp;
  int critical = 0;
  for (int rank = 0; rank < p.pp; ++rank) {
    ChunkCost sum;
    for (int s : StagesOfRank(req.schedule, p.pp, spr, rank)) {
      ChunkCost c = CostOfStage(req, p, split.stages[s], pc);
      sum.f += c.f; sum.b_input += c.b_input; sum.w += c.w; sum.tp += c.tp; sum.ep += c.ep; sum.cp += c.cp;
    }
    const Seconds work = sum.f + sum.b_input + sum.w + sum.tp + sum.ep + sum.cp;
    if (rank == 0 || work > f + b + w + tp + ep + cp) {
      f = sum.f; b = sum.b_input; w = sum.w; tp = sum.tp; ep = sum.ep; cp = sum.cp; critical = rank;
    }
  }
  (void)critical;
  const double M = t.microbatches;
  // Communication inside a micro-batch is on the critical path: fold it into
  // F and B in proportion for the bubble.
  const Seconds comm = tp + ep + cp;
  t.f = f + comm / 3.0;
  t.b = b + comm / 3.0;
  t.w = w + comm / 3.0;
  t.compute = (f + b + w) * M;
  t.tp_comm = tp * M;
  t.ep_comm = ep * M;
  t.cp_comm = cp * M;
  t.bubble = BubbleTime(req.schedule, p.pp, spr, t.f, t.b, t.w, req.step_sync());

  const double tokens = double(req.seq_length()) * req.micro_batch / p.cp;
  const double hop_bytes = tokens * m.hidden * kBf16 / (req.sequence_parallel ? p.tp : 1);
  const BytesPerSecond pp_bw = LinkFor(req, p.pp * p.tp * p.cp * p.dp, e.comm);
  const int stages = p.pp * spr;
  // Fill and drain: one forward and one backward hop per stage boundary.
  t.pp_comm = Seconds(2.0 * (stages - 1) * hop_bytes / pp_bw.value());

  // Gradient sync and the optimizer step on the rank with the most parameters.
  RankParams most;
  for (int rank = 0; rank < p.pp; ++rank) {
    RankParams rp = ParamsOfRank(req, p, split, pc, StagesOfRank(req.schedule, p.pp, spr, rank));
    if (rp.dense + rp.expert > most.dense + most.expert) most = rp;
  }
  const bool lora = req.mode == TrainMode::kLora;
  const double dense = lora ? most.lora_dense : most.dense;
  const double expert = lora ? most.lora_expert : most.expert;
  const int dp_group = p.dp * p.cp;
  const BytesPerSecond dp_bw = req.gpu.gpu_rdma() * e.comm;
  // Reduce-scatter of fp32 gradients, all-gather of bf16 parameters (the
  // same volume as an all-reduce without the distributed optimizer).
  const Seconds dense_sync = Ring(dense * kFp32, dp_group, 1, dp_bw) + Ring(dense * kBf16, dp_group, 1, dp_bw);
  const Seconds expert_sync = Ring(expert * kFp32, p.edp(), 1, dp_bw) + Ring(expert * kBf16, p.edp(), 1, dp_bw);
  t.dp_comm = (dense_sync + expert_sync) * (1 - e.dp_overlap);
  const double shards_dense = req.distributed_optimizer ? dp_group : 1;
  const double shards_expert = req.distributed_optimizer ? p.edp() : 1;
  t.optimizer = TransferTime(Bytes(kAdamBytesPerParam * (dense / shards_dense + expert / shards_expert)), req.gpu.hbm);

  t.total = t.compute + t.tp_comm + t.ep_comm + t.cp_comm + t.bubble + t.pp_comm + t.dp_comm + t.optimizer;
  const int gpus = p.world();
  t.tokens_per_s_per_gpu = t.tokens_per_step / t.total.value() / gpus;
  double flops_per_token = ModelTrainFlopsPerToken(m, pc, req.seq_length());
  if (req.mode == TrainMode::kLora) flops_per_token *= (2.0 + LoraParams(m, req.lora) / pc.total) / 3.0;
  const double model_flops = flops_per_token * t.tokens_per_step;
  const double peak = (req.bf16 ? req.gpu.bf16 : req.gpu.fp16).value();
  t.mfu = model_flops / (t.total.value() * gpus * peak);
  return t;
}

}  // namespace kp
