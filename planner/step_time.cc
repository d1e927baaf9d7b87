#include "planner/step_time.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "planner/layer_ops.h"
#include "planner/memory_model.h"
#include "planner/schedule_model.h"

namespace kp {

namespace {
constexpr int kKdaChunk = 64;
// The width at which a GEMM reaches half its large-shape throughput.
constexpr double kGemmHalfWidth = 128;
constexpr double kBf16 = 2, kFp32 = 4;
// A table without a measured copy bandwidth: Calculon's efficiency for
// transfers over 100 MB (calculon-ai/calculon, systems/*.json "mem1").
constexpr double kUnmeasuredCopyShare = 0.9;
// FP8 recipes against the per-tensor FP8 grid the tables hold (docs/
// planner.md, "FP8"): MX FP8's GEMM-only throughput is 0.95 of per-tensor
// FP8's on a B300 (TransformerEngine's gemm_profiling: 7.161 against 6.812
// ms a layer), DeepSeek's blockwise scaling 0.90 on Hopper (DeepGEMM's 0.65
// of peak against cuBLAS's 0.72 at DeepSeek-V3's shapes).
constexpr double kMxfp8GemmShare = 0.95;
constexpr double kBlockwiseGemmShare = 0.90;
// The bytes a cast moves per element of an FP8 product's input (forward)
// and of its output's gradient (backward): per-tensor current scaling reads
// the bf16 tensor for its amax, then reads it again and writes FP8 rows and
// FP8 columns (2 + 2 + 1 + 1); block and MX scaling find their scales in the
// same pass (2 + 1 + 1, the scales aside).
constexpr double kTensorwiseCastBytes = 6;
constexpr double kScaledCastBytes = 4;
// DeepEP / HybridEP (ExpertExchange).
constexpr double kFlexNvlinkShare = 0.57;
constexpr double kFlexFabricShare = 0.9;
const Seconds kFlexLatency(20e-6);
// A MoE layer's pass costs the host more than a dense one's: the router's
// top-k, the dispatcher's token counts brought to the host before the
// grouped GEMM can be launched, and some forty more kernels; CUDA graphs of
// the attention, router and preprocessing replay most of those launches at
// once. The two constants fitted to the MoE validation set, chosen to keep
// its worst case lowest (docs/planner.md, "MoE layers": fitted on either
// half of its releases alone, both halves give 1.8 ms and 0.5 ms), forward
// and backward alike, whatever the GPU.
Seconds MoeLayerHostTime(CudaGraphs graphs) {
  switch (graphs) {
    case CudaGraphs::kNone: return Seconds(1.4e-3);
    case CudaGraphs::kModules: return Seconds(0.5e-3);
  }
  return Seconds(0);
}
// Expert exchange beside compute (--a2a-overlap) takes SMs from it: DeepEP
// runs on 24 of an H800's 132, so the compute it hides under runs
// 132 / 108 = 1.22 times as long.
constexpr double kOverlapComputeStretch = 132.0 / 108.0 - 1.0;

// A micro-batch's expert exchange as the step sees it: all of it, or with
// --a2a-overlap (Megatron's merged forward and backward) only what the
// other micro-batch's `compute` cannot cover, plus the stretch it puts on
// that compute. compute + the result grows with both arguments, is convex
// and scales with them, so the model's whole work spread over pp ranks
// never exceeds the busiest rank's (ModelWork's floor holds).
Seconds ExposedExchange(const PlanRequest& req, Seconds exchange, Seconds compute) {
  if (!req.recipe.a2a_overlap) return exchange;
  const Seconds hidden = std::min(exchange, compute);
  return exchange - hidden + hidden * kOverlapComputeStretch;
}
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
  const double head = 2 * (pc.head > 0 ? pc.head : pc.embedding);  // the LM head's matmul
  double fwd = head;
  for (int l = 0; l < m.layers; ++l) fwd += LayerForwardFlopsPerToken(m, pc.layers[l], l, seq, 1.0);
  // An MTP layer: its decoder layer (with the 2h -> h projection in its
  // attention count) and the head once more.
  for (const LayerParams& mtp : pc.mtp) fwd += LayerForwardFlopsPerToken(m, mtp, m.layers - 1, seq, 1.0) + head;
  return 3 * fwd;
}

double GemmWidthEfficiency(double n) { return n / (n + kGemmHalfWidth); }

namespace {

double Fp8GemmShare(Fp8Recipe recipe) {
  switch (recipe) {
    case Fp8Recipe::kNone:
    case Fp8Recipe::kTensorwise: return 1.0;
    case Fp8Recipe::kBlockwise: return kBlockwiseGemmShare;
    case Fp8Recipe::kMxfp8: return kMxfp8GemmShare;
  }
  return 1.0;
}

double Fp8CastBytesPerElement(Fp8Recipe recipe) {
  switch (recipe) {
    case Fp8Recipe::kNone: return 0;
    case Fp8Recipe::kTensorwise: return kTensorwiseCastBytes;
    case Fp8Recipe::kBlockwise:
    case Fp8Recipe::kMxfp8: return kScaledCastBytes;
  }
  return 0;
}

BytesPerSecond LinkFor(const PlanRequest& req, int group, double comm_eff) {
  const BytesPerSecond bw = group <= req.nvlink_gpus() ? req.gpu.nvlink : req.gpu.gpu_rdma();
  return bw * comm_eff;
}

// A collective's time: the calibration table's curve for the op and the
// group's span when there is one, else the bus bandwidth model (link x
// --comm-efficiency, nccl-tests' bus factor).
Seconds Collective(const PlanRequest& req, CollectiveOp op, int ranks, int span_ranks, double bytes) {
  if (ranks <= 1 || bytes <= 0) return Seconds(0);
  const LinkSpan span = span_ranks <= req.nvlink_gpus() ? LinkSpan::kNvlink : LinkSpan::kFabric;
  if (req.calibration && req.efficiency.comm_from_table)
    if (auto t = req.calibration->CollectiveTime(op, span, ranks, Bytes(bytes))) return *t;
  return Seconds(BusFactor(op, ranks) * bytes / LinkFor(req, span_ranks, req.efficiency.comm).value());
}

struct ChunkCost {
  Seconds f, b_input, w, tp, ep, cp;
};

// The pieces a layer index stands for besides decoder layers: the head, and
// an MTP layer's projection (its decoder layer and head are priced as those).
constexpr int kHeadPiece = -1;
constexpr int kMtpPiece = -2;

// One stage-chunk's pieces are priced layer by layer and summed, so that a
// search can remember a layer's price (StageCostCache) and get exactly the
// sums an uncached evaluation gets. `layer` < 0 is the head (final norm,
// lm_head, loss).

// Compute with one efficiency constant for every product (--matmul-efficiency,
// or no calibration table): FLOPs over peak x efficiency.
void ConstantCompute(const PlanRequest& req, const ParallelPlan& p, int layer, Recompute rc, const ParamCount& pc,
                     ChunkCost& c) {
  const ModelSpec& m = req.model;
  const EfficiencyModel& e = req.efficiency;
  const double tokens = MicroBatchTokens(req, p);
  const FlopsPerSecond peak = (req.bf16 ? req.gpu.bf16 : req.gpu.fp16) * e.matmul;
  // Under an FP8 recipe the linear layers' products (not the attention core
  // or the head) run at the FP8 peak, at the recipe's share.
  const bool fp8 = req.recipe.fp8 != Fp8Recipe::kNone && req.gpu.fp8.value() > 0;
  const FlopsPerSecond linear_peak = fp8 ? req.gpu.fp8 * e.matmul * Fp8GemmShare(req.recipe.fp8) : peak;
  double fwd = 0, routed = 0, core = 0;
  if (layer == kMtpPiece) {
    fwd = 2.0 * 2 * double(m.hidden) * m.hidden;
  } else if (layer >= 0) {
    const LayerParams& lp = pc.layers[layer];
    const double expert = 2 * lp.routed_expert * m.moe.top_k * e.moe_imbalance;
    fwd = LayerForwardFlopsPerToken(m, lp, layer, req.seq_length(), e.moe_imbalance) - expert;
    routed = expert;
    core = AttentionCoreFlopsPerToken(m, layer, req.seq_length());
  } else {
    fwd = 2.0 * (pc.head > 0 ? pc.head : pc.embedding);
  }
  const double expert_width = m.is_moe() ? double(m.moe.expert_ffn) / p.etp : 1;
  const double linear = layer >= 0 || layer == kMtpPiece ? fwd - core : 0;
  c.f = ComputeTime(Flops(linear * tokens / p.tp), linear_peak) + ComputeTime(Flops((fwd - linear) * tokens / p.tp), peak) +
        ComputeTime(Flops(routed * tokens / p.tp), linear_peak * GemmWidthEfficiency(expert_width));
  // A frozen base has no weight gradients: under LoRA only the adapters' W remains.
  c.w = req.mode == TrainMode::kLora ? c.f * (LoraParams(m, req.lora) / pc.total) : c.f;
  c.b_input = c.f;
  if (rc == Recompute::kFull) c.b_input += c.f;
  if (rc == Recompute::kSelective && !req.flash_attention)
    c.b_input += ComputeTime(Flops(core * tokens / p.tp), peak);
}

// Compute priced from the calibration table: each product at the time the
// table gives its shape (forward A[m,k]B[k,n]; data gradient (m, k, n);
// weight gradient (k, n, m)), the memory-bound passes at the measured copy
// bandwidth (the backward moves twice the forward's bytes).
void CalibratedCompute(const PlanRequest& req, const ParallelPlan& p, int layer, Recompute rc, const ParamCount& pc,
                       const GemmGrid& bf16_grid, ChunkCost& c) {
  const CalibrationTable& table = *req.calibration;
  const BytesPerSecond copy =
      (table.memory_copy.value() > 0 ? table.memory_copy : req.gpu.hbm * kUnmeasuredCopyShare) *
      table.elementwise_share;
  // Under an FP8 recipe a linear layer's products run on the table's FP8
  // grid (measured with per-tensor scales) at the recipe's share of it, and
  // each casts its input forward and its output's gradient backward.
  const Fp8Recipe recipe = req.recipe.fp8;
  const GemmGrid* fp8_grid = recipe != Fp8Recipe::kNone ? table.Gemm(GemmDtype::kFp8) : nullptr;
  auto in_fp8 = [&](const GemmOp& g) { return g.fp8 && fp8_grid != nullptr; };
  // The experts' products in bf16 at the table's grouped grid when it has one
  // (one expert's share of a grouped product), else each on its own.
  const GemmGrid* grouped_grid = table.Gemm(GemmDtype::kBf16Grouped);
  auto grid_of = [&](const GemmOp& g) -> const GemmGrid& {
    if (in_fp8(g)) return *fp8_grid;
    return g.grouped && grouped_grid ? *grouped_grid : bf16_grid;
  };
  const double fp8_speed = Fp8GemmShare(recipe);
  // A product of activations is one batched kernel: priced as one product
  // `count` times taller.
  auto time = [&](const GemmOp& g, double m, double n, double k) {
    const GemmGrid& grid = grid_of(g);
    const Seconds t = g.weight ? grid.Time(m, n, k) * g.count : grid.Time(m * g.count, n, k);
    return in_fp8(g) ? t / fp8_speed : t;
  };
  auto bytes = [&](double b) { return Seconds(b / copy.value()); };
  const double cast = Fp8CastBytesPerElement(recipe);
  const LayerOps ops = layer >= 0            ? DecoderLayerOps(req, p, layer, req.efficiency.moe_imbalance)
                       : layer == kMtpPiece ? MtpProjectionOps(req, p)
                                            : HeadOps(req, p);
  if (layer >= 0) {
    c.f += table.elementwise_layer_overhead;
    c.b_input += table.elementwise_layer_overhead;
  }
  if (layer >= 0 && req.model.is_moe_layer(layer)) {
    const Seconds host = MoeLayerHostTime(req.recipe.cuda_graphs);
    c.f += host;
    c.b_input += host;
  }
  // What selective recomputation redoes in the backward: the forward of
  // each module it names (planner/recipe.h). The attention core is redone
  // only when it is eager (its scores and softmax): flash attention keeps
  // its inputs and statistics, and the planner prices no second pass.
  const bool selective = rc == Recompute::kSelective;
  auto recomputes = [&](OpModule module) {
    return selective && module != OpModule::kCoreAttn && RecomputedBy(req.recipe, module);
  };
  Seconds fwd_gemm, recomputed;
  for (const GemmOp& g : ops.gemms) {
    const Seconds fwd = time(g, g.m, g.n, g.k);
    fwd_gemm += fwd;
    c.b_input += time(g, g.m, g.k, g.n);
    if (g.weight) c.w += time(g, g.k, g.n, g.m);
    else c.b_input += time(g, g.n, g.k, g.m);
    if (in_fp8(g)) {
      const Seconds input_cast = bytes(cast * g.m * g.k * g.count);
      c.f += input_cast;
      c.b_input += bytes(cast * g.m * g.n * g.count);  // the output's gradient
      if (recomputes(g.module)) recomputed += input_cast;
    }
    if (recomputes(g.module)) recomputed += fwd;
  }
  c.f += bytes(ops.elementwise_bytes);
  c.b_input += bytes(ops.elementwise_backward_bytes);
  for (int m = 0; m < kOpModules; ++m)
    if (recomputes(static_cast<OpModule>(m))) recomputed += bytes(ops.module_bytes[m]);
  if (selective && !req.flash_attention && req.recipe.recomputes(RecomputeModule::kCoreAttn)) {
    for (const GemmOp& g : ops.recomputed_core_gemms) recomputed += time(g, g.m, g.n, g.k);
    recomputed += bytes(ops.recomputed_core_bytes);
  }
  c.f += fwd_gemm;
  if (req.mode == TrainMode::kLora) c.w = fwd_gemm * (LoraParams(req.model, req.lora) / pc.total);
  if (rc == Recompute::kFull) c.b_input += c.f;
  c.b_input += recomputed;
}

// The expected number of nodes, besides the sender's, that one token's
// top_k experts fall on when the E experts are spread evenly over `nodes`
// nodes and chosen uniformly: each other node is missed with probability
// C(E - E/nodes, k) / C(E, k).
double DistinctRemoteNodes(int experts, int top_k, int nodes) {
  if (nodes <= 1) return 0;
  const double per_node = double(experts) / nodes;
  double miss = 1;
  for (int i = 0; i < top_k; ++i) miss *= std::max(0.0, (experts - per_node - i) / double(experts - i));
  return (nodes - 1) * (1 - miss);
}

// One dispatch (or combine) over the EP group (ep x etp consecutive ranks);
// `bytes` is what the rank's routed copies weigh. The all-to-all sends
// every copy to its expert's rank: inside the NVLink domain on the table's
// curve; across it, the share for other domains leaves through the GPU's
// own NIC (NCCL's all-to-all cannot pool a node's NICs) while the rest
// crosses NVLink at the same time. DeepEP and HybridEP send a token once
// to each other node that holds one of its experts and fan it out over
// NVLink there, so the fabric carries a token per distinct remote node,
// not a copy per remote expert (DeepSeek-V3 report, section 3.2.2), moving
// both at once at their measured shares of the links (docs/planner.md, "MoE
// layers"): 0.57 of NVLink (HybridEP on B200 and GB200, 0.53-0.61), 0.9 of
// the NIC (DeepEP internode on H800, 43-51 of 50 GB/s).
Seconds ExpertExchange(const PlanRequest& req, const ParallelPlan& p, double bytes) {
  const int span = p.ep * p.etp;
  const ModelSpec& m = req.model;
  const double ep = p.ep;
  const double local = std::min<double>(ep, std::max(1.0, double(req.nvlink_gpus()) / p.etp));
  if (req.recipe.dispatcher == Dispatcher::kAllToAll) {
    if (span <= req.nvlink_gpus()) return Collective(req, CollectiveOp::kAllToAll, p.ep, span, bytes);
    const Seconds inside = Collective(req, CollectiveOp::kAllToAll, int(local), int(local) * p.etp, bytes * local / ep);
    const Seconds outside(bytes * (ep - local) / ep / LinkFor(req, span, req.efficiency.comm).value());
    return std::max(inside, outside);
  }
  const int nodes = int(std::ceil(ep / local));
  const double per_copy = bytes / m.moe.top_k;
  const double over_nvlink = bytes * (local - 1) / ep;
  const double over_fabric = per_copy * DistinctRemoteNodes(m.moe.num_experts, m.moe.top_k, nodes);
  const Seconds nvlink(over_nvlink / (req.gpu.nvlink.value() * kFlexNvlinkShare));
  const Seconds fabric(over_fabric / (req.gpu.gpu_rdma().value() * kFlexFabricShare));
  return kFlexLatency + std::max(nvlink, fabric);
}

// What one layer's token mixer exchanges over CP per micro-batch, as the
// native runtime does (runtime/model/context_parallel.h): MLA all-gathers
// its latent and rotated key (kv_lora_rank + rope values a token), MHA its
// keys and values, forward, and reduce-scatters their gradients backward;
// KDA passes its fp32 state [b, heads / tp, dk, dv] along the 2 cp - 1
// chunk boundaries one hop after another, forward and backward.
Seconds ContextExchange(const PlanRequest& req, const ParallelPlan& p, int layer, double tokens) {
  const ModelSpec& m = req.model;
  const double sequence = tokens * p.cp;  // the micro-batch's tokens over the whole CP group
  const int span = p.tp * p.cp;
  auto gather_and_scatter = [&](double values_per_token) {
    const double bytes = sequence * values_per_token * kBf16;
    return Collective(req, CollectiveOp::kAllGather, p.cp, span, bytes) +
           Collective(req, CollectiveOp::kReduceScatter, p.cp, span, bytes);
  };
  switch (m.attention[layer]) {
    case AttentionKind::kMla: return gather_and_scatter(double(m.mla.kv_lora_rank + m.mla.qk_rope_head_dim));
    case AttentionKind::kMha: return gather_and_scatter(2.0 * m.kv_heads / p.tp * m.head_dim);
    case AttentionKind::kKda: {
      const double state = double(req.micro_batch) * m.heads / p.tp * m.kda.head_dim_k * m.kda.head_dim_v * kFp32;
      return Collective(req, CollectiveOp::kSendRecv, 2, span, state) * (2.0 * (2 * p.cp - 1));
    }
  }
  return Seconds(0);
}

// Compute from the native runtime's measured times (kimi-plan profile on a
// GPU): each piece's forward at the rank's tokens, its share of the measured
// backward (which makes the weight gradients too: no W), cut by TP. The
// embedding is priced with the head; the runtime has no MTP layer.
void ProfiledCompute(const PlanRequest& req, const ParallelPlan& p, int layer, Recompute rc, const PieceTimes& t,
                     ChunkCost& c) {
  if (layer == kMtpPiece) return;
  const double tokens = MicroBatchTokens(req, p);
  const int piece = layer >= 0 ? layer : -1;
  const double forward = layer >= 0 ? t.layers[layer].At(tokens) : t.embedding.At(tokens) + t.head.At(tokens);
  c.f = Seconds(forward / p.tp);
  c.b_input = Seconds(t.BackwardShare(piece, tokens) / p.tp);
  if (rc == Recompute::kFull) c.b_input += c.f;
}

// One decoder layer (or a piece, layer < 0) for one micro-batch, recomputed
// as `rc` says: its compute and the TP, EP and CP collectives inside it.
ChunkCost CostOfLayer(const PlanRequest& req, const ParallelPlan& p, int layer, Recompute rc, const ParamCount& pc) {
  const ModelSpec& m = req.model;
  const EfficiencyModel& e = req.efficiency;
  ChunkCost c;
  const GemmGrid* grid = req.calibration && e.gemm_from_table ? req.calibration->Gemm(GemmDtype::kBf16) : nullptr;
  const bool measured = req.activation_profile && req.activation_profile->time;
  if (measured) ProfiledCompute(req, p, layer, rc, *req.activation_profile->time, c);
  else if (grid) CalibratedCompute(req, p, layer, rc, pc, *grid, c);
  else ConstantCompute(req, p, layer, rc, pc, c);
  if (layer < 0) return c;  // the head's and the MTP projection's collectives are the layers' business

  const double tokens = MicroBatchTokens(req, p);
  const double hidden_bytes = tokens * m.hidden * kBf16;
  // Attention and FFN each end in one all-reduce forward and one backward;
  // with SP each is a reduce-scatter, and an all-gather opens the region.
  if (req.sequence_parallel)
    c.tp += (Collective(req, CollectiveOp::kAllGather, p.tp, p.tp, hidden_bytes) +
             Collective(req, CollectiveOp::kReduceScatter, p.tp, p.tp, hidden_bytes)) * 4.0;
  else
    c.tp += Collective(req, CollectiveOp::kAllReduce, p.tp, p.tp, hidden_bytes) * 4.0;
  if (m.is_moe_layer(layer) && p.ep * p.etp > 1) {
    const double in = m.moe.latent_dim > 0 ? m.moe.latent_dim : m.hidden;
    const double routed = tokens * m.moe.top_k / p.tp * e.moe_imbalance;  // the copies this rank routes
    // Dispatch and combine, forward and backward: each exchange moves the
    // rank's copies over EP.
    c.ep += ExpertExchange(req, p, routed * in * kBf16) * 4.0;
    // With ETP the ETP group's copies are gathered onto each of its ranks
    // and the partial outputs reduce-scattered back; the backward mirrors
    // both (runtime/model/expert_parallel.h).
    const double gathered = routed * p.etp * in * kBf16;
    c.ep += (Collective(req, CollectiveOp::kAllGather, p.etp, p.etp, gathered) +
             Collective(req, CollectiveOp::kReduceScatter, p.etp, p.etp, gathered)) * 2.0;
  }
  if (p.cp > 1) c.cp += ContextExchange(req, p, layer, tokens);
  return c;
}

void Accumulate(ChunkCost& sum, const ChunkCost& c) {
  sum.f += c.f; sum.b_input += c.b_input; sum.w += c.w; sum.tp += c.tp; sum.ep += c.ep; sum.cp += c.cp;
}

}  // namespace

SyncTerms SyncTermsOf(const PlanRequest& req, const ParallelPlan& p, const std::vector<RankParams>& ranks) {
  const EfficiencyModel& e = req.efficiency;
  RankParams most;
  for (const RankParams& rp : ranks)
    if (rp.dense + rp.expert > most.dense + most.expert) most = rp;
  const bool lora = req.mode == TrainMode::kLora;
  const double dense = lora ? most.lora_dense : most.dense;
  const double expert = lora ? most.lora_expert : most.expert;
  const int dp_group = p.dp * p.cp;
  // DP groups are strided over the pipeline's other ranks: they leave the
  // node as soon as the stage's tp x cp x dp ranks do not fit in one.
  const int dp_span = p.tp * p.cp * p.dp;
  // With the distributed optimizer: a reduce-scatter of the gradients and
  // an all-gather of the bf16 parameters; without: an all-reduce of the
  // gradients. Gradients are fp32 under bf16, fp16 under fp16 (Megatron-LM).
  const double grad_bytes = req.bf16 && req.recipe.grad_reduce_in_fp32 ? kFp32 : kBf16;
  // With --fp8-param-gather the parameters are gathered in FP8.
  const bool fp8_params = req.recipe.fp8 != Fp8Recipe::kNone && req.recipe.fp8_param_gather;
  const double param_bytes = fp8_params ? 1.0 : kBf16;
  auto sync = [&](double params, int group) {
    if (!req.distributed_optimizer) return Collective(req, CollectiveOp::kAllReduce, group, dp_span, params * grad_bytes);
    return Collective(req, CollectiveOp::kReduceScatter, group, dp_span, params * grad_bytes) +
           Collective(req, CollectiveOp::kAllGather, group, dp_span, params * param_bytes);
  };
  SyncTerms t;
  t.dp_comm = (sync(dense, dp_group) + sync(expert, p.edp())) * (1 - e.dp_overlap);
  const double shards_dense = req.distributed_optimizer ? dp_group : 1;
  const double shards_expert = req.distributed_optimizer ? p.edp() : 1;
  // Adam reads the master weight, both moments and the gradient, and writes
  // the master, the moments and the model's weight.
  const double moment = req.recipe.moments == MomentsDtype::kBf16 ? kBf16 : kFp32;
  const double adam_bytes = 2 * kFp32 + 4 * moment + grad_bytes + param_bytes;
  t.optimizer = TransferTime(Bytes(adam_bytes * (dense / shards_dense + expert / shards_expert)), req.gpu.hbm);
  return t;
}

struct StageCostCache::Impl {
  // Layers alike in everything their price reads (attention kind, MoE or
  // not, parameter counts) share one entry; -1 is the head.
  std::vector<int> kind_of_layer;
  int kinds = 0;
  // One table per (tp, cp, ep, etp, micro-batch, recompute): the price of
  // each kind of layer, then the head's and the MTP projection's, filled as
  // they are first asked for.
  using Context = std::tuple<int, int, int, int, int, int>;
  std::map<Context, std::vector<std::optional<ChunkCost>>> tables;

  void Prepare(const ModelSpec& m, const ParamCount& pc) {
    if (!kind_of_layer.empty() || m.layers == 0) return;
    std::vector<int> firsts;
    for (int l = 0; l < m.layers; ++l) {
      int kind = -1;
      for (size_t k = 0; k < firsts.size() && kind < 0; ++k)
        if (Alike(m, pc, l, firsts[k])) kind = static_cast<int>(k);
      if (kind < 0) {
        kind = static_cast<int>(firsts.size());
        firsts.push_back(l);
      }
      kind_of_layer.push_back(kind);
    }
    kinds = static_cast<int>(firsts.size());
  }

  std::vector<std::optional<ChunkCost>>& Table(const PlanRequest& req, const ParallelPlan& p, const ParamCount& pc,
                                               Recompute rc) {
    Prepare(req.model, pc);
    const Context key{p.tp, p.cp, p.ep, p.etp, req.micro_batch, static_cast<int>(rc)};
    auto it = tables.find(key);
    if (it == tables.end()) it = tables.emplace(key, std::vector<std::optional<ChunkCost>>(kinds + 2)).first;
    return it->second;
  }

  // The MFU numerator's FLOPs per token: one model and sequence per cache.
  double ModelFlops(const ModelSpec& m, const ParamCount& pc, int seq) {
    if (!model_flops) model_flops = ModelTrainFlopsPerToken(m, pc, seq);
    return *model_flops;
  }
  std::optional<double> model_flops;

  static bool Alike(const ModelSpec& m, const ParamCount& pc, int a, int b) {
    const LayerParams &x = pc.layers[a], &y = pc.layers[b];
    return m.attention[a] == m.attention[b] && m.is_moe_layer(a) == m.is_moe_layer(b) &&
           x.attention == y.attention && x.attention_replicated == y.attention_replicated && x.dense_ffn == y.dense_ffn && x.routed_expert == y.routed_expert &&
           x.routed_experts == y.routed_experts && x.shared_experts == y.shared_experts &&
           x.latent_proj == y.latent_proj && x.router == y.router && x.norms == y.norms;
  }
};

namespace {

// Prices layers of one request and plan, each recomputed as it says,
// through the cache's tables when there is a cache (each priced once).
class LayerPricer {
 public:
  LayerPricer(const PlanRequest& req, const ParallelPlan& p, const ParamCount& pc, StageCostCache* cache)
      : req_(req), p_(p), pc_(pc), cache_(cache ? &cache->impl() : nullptr) {}

  ChunkCost operator()(int layer, Recompute rc) {
    // Measured times are per layer, not per kind of layer: no cache.
    if (!cache_ || (req_.activation_profile && req_.activation_profile->time)) return CostOfLayer(req_, p_, layer, rc, pc_);
    std::vector<std::optional<ChunkCost>>*& table = tables_[static_cast<int>(rc)];
    if (!table) table = &cache_->Table(req_, p_, pc_, rc);
    const int index = layer == kHeadPiece  ? cache_->kinds
                      : layer == kMtpPiece ? cache_->kinds + 1
                                           : cache_->kind_of_layer[layer];
    std::optional<ChunkCost>& slot = (*table)[index];
    if (!slot) slot = CostOfLayer(req_, p_, layer, rc, pc_);
    return *slot;
  }

 private:
  const PlanRequest& req_;
  const ParallelPlan& p_;
  const ParamCount& pc_;
  StageCostCache::Impl* cache_;
  std::vector<std::optional<ChunkCost>>* tables_[3] = {};
};

// An MTP layer: a decoder layer like the last (recomputed as `rc`), its
// 2h -> h projection, and the head again (as the head is, `head_rc`).
void AccumulateMtpLayer(const ModelSpec& m, LayerPricer& price, Recompute rc, Recompute head_rc, ChunkCost& sum) {
  Accumulate(sum, price(m.layers - 1, rc));
  Accumulate(sum, price(kMtpPiece, rc));
  Accumulate(sum, price(kHeadPiece, head_rc));
}

}  // namespace

StageCostCache::StageCostCache() : impl_(std::make_unique<Impl>()) {}
StageCostCache::~StageCostCache() = default;

Seconds StepTimeFloorOfLayout(const PlanRequest& req, const ParallelPlan& p, const StageSplit& split,
                              const ParamCount& pc) {
  return StepTimeFloorOfLayout(req, p, ParamsOfRanks(req, p, split, pc));
}

Seconds StepTimeFloorOfLayout(const PlanRequest& req, const ParallelPlan& p, const std::vector<RankParams>& ranks) {
  return SyncFloor(SyncTermsOf(req, p, ranks));
}

Seconds SyncFloor(const SyncTerms& t) {
  // Rounding is monotone, so the step's longer sum is never below this one;
  // shaved all the same, as a floor may only be lower.
  return (t.dp_comm + t.optimizer) * (1 - 1e-12);
}

std::string PricingOf(const PlanRequest& req) {
  const EfficiencyModel& e = req.efficiency;
  const bool gemm = req.calibration && e.gemm_from_table && req.calibration->Gemm(GemmDtype::kBf16);
  const bool comm = req.calibration && e.comm_from_table && !req.calibration->collectives.empty();
  auto fixed = [](double v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.2f", v);
    return std::string(buf);
  };
  std::string out;
  if (req.activation_profile && req.activation_profile->time)
    return "measured times of the native runtime (" + req.activation_profile->model + ", kimi-plan profile on " +
           req.activation_profile->device + ")" + (comm ? "; collectives from the " + req.calibration->gpu + " table" : "");
  if (gemm || comm) {
    out = req.calibration->gpu + " calibration table (" + std::string(gemm ? "products, memory passes" : "") +
          (gemm && comm ? ", " : "") + (comm ? "collectives" : "") + ")";
  }
  if (!gemm) out += (out.empty() ? "" : "; ") + std::string("matmul efficiency ") + fixed(e.matmul);
  if (!comm) out += (out.empty() ? "" : "; ") + std::string("comm efficiency ") + fixed(e.comm);
  return out;
}

Seconds ModelWork(const PlanRequest& req, const ParallelPlan& p, const ParamCount& pc, StageCostCache* cache) {
  LayerPricer price(req, p, pc, cache);
  ChunkCost sum;
  for (int l = 0; l < req.model.layers; ++l) Accumulate(sum, price(l, Recompute::kNone));
  Accumulate(sum, price(kHeadPiece, Recompute::kNone));
  for (int k = 0; k < req.model.mtp_layers; ++k) AccumulateMtpLayer(req.model, price, Recompute::kNone, Recompute::kNone, sum);
  const Seconds compute = sum.f + sum.b_input + sum.w;
  return compute + sum.tp + ExposedExchange(req, sum.ep, compute) + sum.cp;
}

std::vector<int> DistinctRanks(const PlanRequest& req, const ParallelPlan& p, const StageSplit& split,
                               const ParamCount& pc, StageCostCache& cache) {
  std::vector<int> out;
  const bool per_layer = req.activation_profile && req.activation_profile->time;
  cache.impl().Prepare(req.model, pc);
  const std::vector<int>& kind = cache.impl().kind_of_layer;
  const int spr = StagesPerRank(req.schedule, p.vp);
  std::set<std::vector<int>> seen;
  for (int rank = 0; rank < p.pp; ++rank) {
    // What EstimateStepTime reads of a rank: its stages' layer kinds in
    // order, each stage closed by its MTP layers and head.
    std::vector<int> signature;
    for (int k = 0; k < spr; ++k) {
      const StageLayers& st = split.stages[StageOfRank(req.schedule, p.pp, rank, k)];
      for (int l = st.first_layer; l < st.end_layer; ++l) signature.push_back(kind[l]);
      signature.push_back(-1 - st.mtp);
      signature.push_back(st.head ? -1 : -2);
    }
    if (per_layer || seen.insert(std::move(signature)).second) out.push_back(rank);
  }
  return out;
}

StepTime EstimateStepTime(const PlanRequest& req, const ParallelPlan& p, const StageSplit& split,
                          const ParamCount& pc, StageCostCache* cache, const SyncTerms* given_sync,
                          const std::vector<int>* ranks) {
  const ModelSpec& m = req.model;
  StepTime t;
  t.microbatches = static_cast<int>(req.sequences() / (static_cast<long long>(p.dp) * req.micro_batch));
  t.tokens_per_step = double(req.sequences()) * req.seq_length();
  const int spr = StagesPerRank(req.schedule, p.vp);
  const OptimizerSync step_sync = req.step_sync();

  LayerPricer price(req, p, pc, cache);
  // The critical rank: the one with the most work per micro-batch, its
  // expert exchange as exposed under --a2a-overlap. Each rank's own bubble
  // is kept for the floor (StepTime::total_floor).
  Seconds f, b, w, tp, ep, cp;
  Seconds least_bubble;
  // Most ranks of a pipeline hold the same layers: the last rank's terms
  // and bubble, so that a rank like it costs no second BubbleTime.
  std::tuple<Seconds, Seconds, Seconds, Seconds> last_terms;
  Seconds last_bubble;
  const int priced = ranks ? static_cast<int>(ranks->size()) : p.pp;
  for (int i = 0; i < priced; ++i) {
    const int rank = ranks ? (*ranks)[i] : i;
    const bool first = i == 0;
    ChunkCost sum;
    for (int k = 0; k < spr; ++k) {
      const StageLayers& st = split.stages[StageOfRank(req.schedule, p.pp, rank, k)];
      for (int l = st.first_layer; l < st.end_layer; ++l) Accumulate(sum, price(l, LayerRecompute(req, l - st.first_layer)));
      for (int j = 0; j < st.mtp; ++j)
        AccumulateMtpLayer(m, price, LayerRecompute(req, st.layer_count() + j), req.recompute, sum);
      // The head's forward is counted again under full recomputation, by either method.
      if (st.head) Accumulate(sum, price(kHeadPiece, req.recompute));
    }
    sum.ep = ExposedExchange(req, sum.ep, sum.f + sum.b_input + sum.w);
    const Seconds comm = (sum.tp + sum.ep + sum.cp) / 3.0;
    const auto terms = std::make_tuple(sum.f, sum.b_input, sum.w, comm);
    if (first || terms != last_terms) {
      last_terms = terms;
      last_bubble = BubbleTime(req.schedule, p.pp, spr, sum.f + comm, sum.b_input + comm, sum.w + comm, step_sync);
    }
    if (first || last_bubble < least_bubble) least_bubble = last_bubble;
    const Seconds work = sum.f + sum.b_input + sum.w + sum.tp + sum.ep + sum.cp;
    if (first || work > f + b + w + tp + ep + cp) {
      f = sum.f; b = sum.b_input; w = sum.w; tp = sum.tp; ep = sum.ep; cp = sum.cp;
    }
  }
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
  t.bubble = BubbleTime(req.schedule, p.pp, spr, t.f, t.b, t.w, step_sync);

  const double hop_bytes = MicroBatchTokens(req, p) * m.hidden * kBf16 / (req.sequence_parallel ? p.tp : 1);
  const Seconds hop = Collective(req, CollectiveOp::kSendRecv, 2, p.pp * p.tp * p.cp * p.dp, hop_bytes);
  t.pp_comm = hop * CriticalHops(req.schedule, p.pp, p.vp, t.microbatches, req.p2p());

  const SyncTerms sync = given_sync ? *given_sync : SyncTermsOf(req, p, ParamsOfRanks(req, p, split, pc));
  t.dp_comm = sync.dp_comm;
  t.optimizer = sync.optimizer;

  t.total = t.compute + t.tp_comm + t.ep_comm + t.cp_comm + t.bubble + t.pp_comm + t.dp_comm + t.optimizer;
  // Shaved by a relative 1e-12 so that rounding in the subtraction never
  // lifts it above a total it must not exceed (a floor may only be lower).
  t.total_floor = std::min(t.total, t.total - t.bubble + least_bubble) * (1 - 1e-12);
  const int gpus = p.world();
  t.tokens_per_s_per_gpu = t.tokens_per_step / t.total.value() / gpus;
  double flops_per_token = cache ? cache->impl().ModelFlops(m, pc, req.seq_length())
                                 : ModelTrainFlopsPerToken(m, pc, req.seq_length());
  if (req.mode == TrainMode::kLora) flops_per_token *= (2.0 + LoraParams(m, req.lora) / pc.total) / 3.0;
  const double model_flops = flops_per_token * t.tokens_per_step;
  const double peak = (req.bf16 ? req.gpu.bf16 : req.gpu.fp16).value();
  t.mfu = model_flops / (t.total.value() * gpus * peak);
  return t;
}

}  // namespace kp
