#include "planner/layer_ops.h"

#include <algorithm>

namespace kp {

namespace {
constexpr double kBf16 = 2, kFp32 = 4;
constexpr double kKdaChunk = 64;

// The fused kernels of Megatron-LM (fused layer norm, bias-dropout-add,
// scale-mask-softmax, bias-GeLU / SwiGLU) read each input once and write
// each output once; these are their bytes per element.
constexpr double kNormBytes = 2 * kBf16;             // read x, write y
constexpr double kResidualBytes = 3 * kBf16;         // read x and residual, write the sum
constexpr double kDropoutMaskBytes = 1;              // one byte of mask per element
constexpr double kSoftmaxBytes = 2 * kBf16;          // read the scores, write the probabilities
constexpr double kAttnDropoutBytes = 2 * kBf16 + 1;  // read, write, mask

// What a pass's backward moves per byte of its forward: a norm, an
// activation function or a softmax reads its saved input (or output) and the
// incoming gradient and writes one gradient, 3 elements for the forward's 2;
// dropout and the residual add pass the gradient through a mask or on (as
// many bytes as the forward); the loss's backward writes the logits'
// gradient once from the saved statistics.
constexpr double kReadTwoWriteOne = 1.5;
constexpr double kPassThrough = 1.0;
constexpr double kLossBackward = 0.5;
// Dropout's forward also draws its mask (Philox): with it counted as one
// more pass over the dropped tensor, the forward and backward passes of the
// Zero Bubble paper's A100 layers (Qi et al. 2024, profiled T_F, T_B: four
// GPT sizes) reach the same bandwidth (770-980 GB/s) rather than 550-700
// forward against 860-1020 backward.
constexpr double kDropoutRngPasses = 2.0;

void Pass(LayerOps& ops, double bytes, double backward_factor) {
  ops.elementwise_bytes += bytes;
  ops.elementwise_backward_bytes += bytes * backward_factor;
  ops.module_bytes[static_cast<int>(ops.module)] += bytes;
}

void DropoutPass(LayerOps& ops, double bytes) {
  Pass(ops, bytes * kDropoutRngPasses, kPassThrough / kDropoutRngPasses);
}

// Ops added while it lives belong to `module`.
class InModule {
 public:
  InModule(LayerOps& ops, OpModule module) : ops_(ops), saved_(ops.module) { ops.module = module; }
  ~InModule() { ops_.module = saved_; }
  InModule(const InModule&) = delete;
  InModule& operator=(const InModule&) = delete;

 private:
  LayerOps& ops_;
  OpModule saved_;
};

struct Dims {
  double T;   // tokens of the micro-batch on this rank (all-gathered over TP)
  double s;   // keys each query attends to (the whole sequence)
  double b;   // sequences in the micro-batch
  double t;   // tensor-parallel size
  double h;
  double whole_rows;  // the rows a map TP leaves whole runs on: T / t with SP (the shard), T without
};

// A product of the current module; a linear layer's (weight, not the
// router's) runs in FP8 under an FP8 recipe.
void Add(LayerOps& ops, double m, double n, double k, double count = 1, bool weight = true) {
  if (m <= 0 || n <= 0 || k <= 0 || count <= 0) return;
  ops.gemms.push_back({m, n, k, count, weight, /*fp8=*/weight, ops.module, /*grouped=*/false});
}

void AddRouter(LayerOps& ops, double m, double n, double k) {
  Add(ops, m, n, k);
  ops.gemms.back().fp8 = false;  // Megatron's router runs in fp32 (moe_router_dtype)
}

// Scores and context products of softmax attention over `heads` heads with
// query/key width dqk and value width dv. Eager attention computes the whole
// s x s square (the mask is applied after); flash attention skips the
// masked half of a causal square.
void AttentionCore(const PlanRequest& req, const Dims& d, double heads, double dqk, double dv, LayerOps& ops) {
  InModule core_attn(ops, OpModule::kCoreAttn);
  const double q_per_seq = d.T / d.b;
  const double count = d.b * heads / d.t * (req.flash_attention ? 0.5 : 1.0);
  LayerOps core;
  Add(core, q_per_seq, d.s, dqk, count, false);  // Q K^T
  Add(core, q_per_seq, dv, d.s, count, false);   // P V
  ops.gemms.insert(ops.gemms.end(), core.gemms.begin(), core.gemms.end());
  if (req.flash_attention) return;
  const double scores = d.T * d.s * heads / d.t;
  Pass(ops, scores * kSoftmaxBytes, kReadTwoWriteOne);
  if (req.model.dropout) DropoutPass(ops, scores * kAttnDropoutBytes);
  ops.recomputed_core_bytes += scores * (kSoftmaxBytes + (req.model.dropout ? kAttnDropoutBytes : 0));
  ops.recomputed_core_gemms = core.gemms;
}

void Mha(const PlanRequest& req, const Dims& d, LayerOps& ops) {
  const ModelSpec& m = req.model;
  const double q = double(m.heads) * m.head_dim, kv = double(m.kv_heads) * m.head_dim;
  Add(ops, d.T, (q + 2 * kv) / d.t, d.h);
  Add(ops, d.T, d.h, q / d.t);
  AttentionCore(req, d, m.heads, m.head_dim, m.head_dim, ops);
}

void Mla(const PlanRequest& req, const Dims& d, LayerOps& ops) {
  const ModelSpec& m = req.model;
  const MlaShape& s = m.mla;
  const double H = m.heads, qk = s.qk_nope_head_dim + s.qk_rope_head_dim;
  // The down-projections and the latents' norms are whole on every TP rank
  // (docs/runtime.md §6), on the rows it holds.
  if (s.q_lora_rank > 0) {
    Add(ops, d.whole_rows, s.q_lora_rank, d.h);
    InModule up(ops, OpModule::kMlaUpProj);
    Add(ops, d.T, H * qk / d.t, s.q_lora_rank);
  } else {
    Add(ops, d.T, H * qk / d.t, d.h);
  }
  Add(ops, d.whole_rows, s.kv_lora_rank + s.qk_rope_head_dim, d.h);
  {
    InModule up(ops, OpModule::kMlaUpProj);
    Add(ops, d.T, H * (s.qk_nope_head_dim + s.v_head_dim) / d.t, s.kv_lora_rank);
  }
  if (s.output_gate) Add(ops, d.T, H * s.v_head_dim / d.t, d.h);
  Add(ops, d.T, d.h, H * s.v_head_dim / d.t);
  AttentionCore(req, d, H, qk, s.v_head_dim, ops);
  // The latents' norms, the rotary embedding (and the output gate's sigmoid).
  const double gate = s.output_gate ? H * s.v_head_dim : 0;
  Pass(ops, (d.whole_rows * (s.q_lora_rank + s.kv_lora_rank) + d.T * (H * qk + gate) / d.t) * kNormBytes,
       kReadTwoWriteOne);
}

void Kda(const PlanRequest& req, const Dims& d, LayerOps& ops) {
  const ModelSpec& m = req.model;
  const double H = m.heads, dk = m.kda.head_dim_k, dv = m.kda.head_dim_v;
  Add(ops, d.T, H * (2 * dk + dv) / d.t, d.h);  // q, k, v
  Add(ops, d.T, d.h, H * dv / d.t);             // o
  Add(ops, d.whole_rows, dk, d.h);               // forget gate, low rank (first map whole on every TP rank)
  Add(ops, d.T, H * dk / d.t, dk);
  Add(ops, d.whole_rows, dv, d.h);               // output gate, low rank
  Add(ops, d.T, H * dv / d.t, dv);
  // The chunked delta rule: per 64-token chunk and head, the intra-chunk
  // square (causal) and three d_k x d_v products with the state.
  const double chunks = d.T / kKdaChunk * H / d.t;
  Add(ops, kKdaChunk, kKdaChunk, dk + dv, 0.5 * chunks, false);
  Add(ops, kKdaChunk, dv, dk, 3 * chunks, false);
  // Short convolutions, the L2 norms of q and k, the fp32 gates, the gated
  // output norm: each reads and writes its tensor once.
  const double width = H * (2 * dk + dv) / d.t;
  Pass(ops, d.T * (2 * width * kBf16 + 2 * 2 * H * dk / d.t * kBf16 + 2 * H * dk / d.t * kFp32 +
                  3 * H * dv / d.t * kBf16),
       kReadTwoWriteOne);
}

void DenseFfn(const PlanRequest& req, const Dims& d, double ffn, LayerOps& ops) {
  if (ffn <= 0) return;
  if (req.model.gated_ffn) {
    Add(ops, d.T, 2 * ffn / d.t, d.h);
    Pass(ops, d.T * ffn / d.t * 3 * kBf16, kReadTwoWriteOne);  // read gate and up, write the product
  } else {
    Add(ops, d.T, ffn / d.t, d.h);
    Pass(ops, d.T * ffn / d.t * 2 * kBf16, kReadTwoWriteOne);  // fused bias-GeLU
  }
  Add(ops, d.T, d.h, ffn / d.t);
}

void Moe(const PlanRequest& req, const ParallelPlan& p, const Dims& d, double imbalance, LayerOps& ops) {
  const MoeShape& e = req.model.moe;
  const double in = e.latent_dim > 0 ? e.latent_dim : d.h;
  const double router_tokens = req.sequence_parallel ? d.T / d.t : d.T;
  InModule moe(ops, OpModule::kMoe);
  AddRouter(ops, router_tokens, e.num_experts, d.h);
  Pass(ops, router_tokens * e.num_experts * kFp32 * 3, kReadTwoWriteOne);  // softmax / sigmoid, top-k
  if (e.latent_dim > 0) {  // whole on every TP rank
    Add(ops, d.whole_rows, e.latent_dim, d.h);
    Add(ops, d.whole_rows, d.h, e.latent_dim);
  }
  {
    InModule shared(ops, OpModule::kSharedExperts);
    DenseFfn(req, d, double(e.shared_experts) * e.shared_ffn, ops);
  }
  // Routed copies on this rank, and per local expert.
  const double copies = d.T * e.top_k * p.etp / d.t * imbalance;
  const double local_experts = double(e.num_experts) / p.ep;
  const double per_expert = copies * p.ep / e.num_experts;
  const double f = double(e.expert_ffn) / p.etp;
  Add(ops, per_expert, 2 * f, in, local_experts);
  ops.gemms.back().grouped = true;
  Add(ops, per_expert, in, f, local_experts);
  ops.gemms.back().grouped = true;
  // Permute into expert order and back (dispatch and combine): their own
  // kernels with the all-to-all dispatcher; DeepEP and HybridEP fuse them
  // into the exchange.
  if (req.recipe.dispatcher == Dispatcher::kAllToAll) Pass(ops, copies * 2 * 2 * in * kBf16, kPassThrough);
  InModule act(ops, OpModule::kMoeAct);
  Pass(ops, copies * 3 * f * kBf16, kReadTwoWriteOne);  // SwiGLU
}

}  // namespace

bool RecomputeCovers(RecomputeModule recomputed, OpModule module) {
  switch (recomputed) {
    case RecomputeModule::kCoreAttn: return module == OpModule::kCoreAttn;
    case RecomputeModule::kMlaUpProj: return module == OpModule::kMlaUpProj;
    case RecomputeModule::kLayernorm: return module == OpModule::kLayernorm;
    case RecomputeModule::kMlp: return module == OpModule::kMlp;
    case RecomputeModule::kMoe:
      return module == OpModule::kMoe || module == OpModule::kMoeAct || module == OpModule::kSharedExperts;
    case RecomputeModule::kMoeAct: return module == OpModule::kMoeAct;
    case RecomputeModule::kSharedExperts: return module == OpModule::kSharedExperts;
  }
  return false;
}

bool RecomputedBy(const RecipeOptions& recipe, OpModule module) {
  for (RecomputeModule r : recipe.recompute_modules)
    if (RecomputeCovers(r, module)) return true;
  return false;
}

double MicroBatchTokens(const PlanRequest& req, const ParallelPlan& p) {
  return double(req.seq_length()) * req.micro_batch / p.cp;
}

LayerOps DecoderLayerOps(const PlanRequest& req, const ParallelPlan& p, int layer, double imbalance) {
  const ModelSpec& m = req.model;
  const double T = MicroBatchTokens(req, p);
  const Dims d{T, double(req.seq_length()), double(req.micro_batch), double(p.tp), double(m.hidden),
               req.sequence_parallel ? T / p.tp : T};
  LayerOps ops;
  switch (m.attention[layer]) {
    case AttentionKind::kMha: Mha(req, d, ops); break;
    case AttentionKind::kMla: Mla(req, d, ops); break;
    case AttentionKind::kKda: Kda(req, d, ops); break;
  }
  if (m.is_moe_layer(layer)) {
    Moe(req, p, d, imbalance, ops);
  } else {
    InModule mlp(ops, OpModule::kMlp);
    DenseFfn(req, d, m.dense_ffn, ops);
  }
  // Two norms and two residual adds on the hidden state: on a sequence shard
  // with sequence parallelism, on the whole sequence on every TP rank without.
  const double hidden_tokens = req.sequence_parallel ? d.T / d.t : d.T;
  {
    InModule norms(ops, OpModule::kLayernorm);
    Pass(ops, hidden_tokens * 2 * kNormBytes * d.h, kReadTwoWriteOne);
  }
  if (m.dropout) DropoutPass(ops, hidden_tokens * 2 * (kResidualBytes + kDropoutMaskBytes) * d.h);
  else Pass(ops, hidden_tokens * 2 * kResidualBytes * d.h, kPassThrough);
  // Block attention residuals: each of the two depth reads attends over the
  // block stack (on average half the blocks plus the partial one).
  if (m.attn_res_block > 0)
    Pass(ops, hidden_tokens * 2 * (m.attn_res_blocks() / 2.0 + 1) * d.h * kBf16, kReadTwoWriteOne);
  return ops;
}

LayerOps HeadOps(const PlanRequest& req, const ParallelPlan& p) {
  const ModelSpec& m = req.model;
  const double T = MicroBatchTokens(req, p), t = p.tp, V = m.vocab;
  LayerOps ops;
  Add(ops, T, V / t, m.hidden);
  ops.gemms.back().fp8 = false;  // Megatron keeps the output layer in BF16
  // The final norm, then the vocabulary-parallel cross entropy in fp32:
  // the logits up-cast, their max and sum of exponentials, the loss.
  Pass(ops, (req.sequence_parallel ? T / t : T) * m.hidden * kNormBytes, kReadTwoWriteOne);
  Pass(ops, T * V / t * (kBf16 + 3 * kFp32), kLossBackward);
  return ops;
}

LayerOps MtpProjectionOps(const PlanRequest& req, const ParallelPlan& p) {
  const ModelSpec& m = req.model;
  const double T = MicroBatchTokens(req, p), t = p.tp;
  LayerOps ops;
  Add(ops, T, m.hidden / t, 2.0 * m.hidden);
  Pass(ops, 2 * (req.sequence_parallel ? T / t : T) * m.hidden * kNormBytes, kReadTwoWriteOne);
  return ops;
}

}  // namespace kp
