#include "planner/memory_model.h"

#include <algorithm>

#include "common/table.h"
#include "planner/layer_ops.h"
#include "planner/schedule_model.h"

namespace kp {

namespace {

constexpr double kBf16 = 2, kFp32 = 4;
// CUDA context, NCCL communicators and cuBLAS workspaces of one process.
const Bytes kRuntimeReserve = GB(2.0);
// vLLM's defaults: the token budget of one scheduler step, and the share of
// the GPU it takes when it has the GPU to itself.
constexpr int kRolloutBatchedTokens = 8192;
constexpr double kSplitRolloutUtilization = 0.9;
// KDA's chunked kernels keep one fp32 state per chunk of this many tokens.
constexpr int kKdaChunk = 64;

void AddAttentionTerms(const ModelSpec& m, AttentionKind kind, bool flash, LayerActivationTerms& t) {
  const double h = m.hidden, a = m.heads;
  auto core = [&] {
    if (flash) t.split += kFp32 * a;  // the softmax statistics flash attention keeps
    else t.per_seq_token += kBf16 * a + (m.dropout ? 3 * a : 0);
  };
  switch (kind) {
    case AttentionKind::kMha: {
      const double q = a * m.head_dim, kv = double(m.kv_heads) * m.head_dim;
      t.replicated += kBf16 * h;                  // QKV input
      t.split += kBf16 * (q + kv + kv + q);       // Q, K, V, output-projection input
      t.fp8_replicated += kBf16 * h;
      t.fp8_split += kBf16 * q;
      core();
      break;
    }
    case AttentionKind::kMla: {
      const MlaShape& s = m.mla;
      const double qk = s.qk_nope_head_dim + s.qk_rope_head_dim;
      t.replicated += kBf16 * h;                                   // down-projection input
      if (s.q_lora_rank > 0) t.replicated += kBf16 * 2 * s.q_lora_rank;  // q latent, before and after its norm
      t.replicated += kBf16 * (s.kv_lora_rank + s.qk_rope_head_dim);     // kv latent and shared rope key
      t.replicated += kBf16 * s.kv_lora_rank;                            // normed kv latent
      t.split += kBf16 * a * (qk + qk + s.v_head_dim + s.v_head_dim);    // Q, K, V, output-projection input
      t.mla_up += kBf16 * a * (qk + qk + s.v_head_dim);
      t.fp8_replicated += kBf16 * (h + s.q_lora_rank + s.kv_lora_rank);
      t.fp8_split += kBf16 * a * s.v_head_dim;
      core();
      break;
    }
    case AttentionKind::kKda: {
      const double dk = m.kda.head_dim_k, dv = m.kda.head_dim_v;
      t.replicated += kBf16 * (h + dk + dv);  // input, low-rank gate bottlenecks
      t.split += kBf16 * a * (2 * dk + dv) * 2;  // q/k/v before and after the short convolutions
      t.split += kBf16 * a * 2 * dk;             // L2-normalised q and k
      t.split += kFp32 * a * (dk + 1);           // forget gate and beta
      t.split += kBf16 * a * dv * 4;             // output, output gate, gated-norm and o-proj inputs
      t.split += kFp32 * a * dk * dv / kKdaChunk;  // chunk states
      break;
    }
  }
}

}  // namespace

LayerActivationTerms LayerActivationTermsOf(const ModelSpec& m, int layer, int etp, bool flash,
                                            ExpertActivations experts) {
  LayerActivationTerms t;
  const double h = m.hidden;
  t.replicated += kBf16 * 2 * h;           // the two norms' inputs
  t.norms += kBf16 * h;                    // of which the second norm's output is the FFN's input
  if (m.dropout) t.replicated += 2 * h;    // two 1-byte dropout masks
  AddAttentionTerms(m, m.attention[layer], flash, t);
  t.replicated += kBf16 * h;               // FFN / router input
  t.fp8_replicated += kBf16 * h;
  if (!m.is_moe_layer(layer)) {
    const double inside = kBf16 * m.dense_ffn * (m.gated_ffn ? 4 : 2);
    t.split += inside;
    t.mlp += inside;
    t.fp8_split += kBf16 * m.dense_ffn;  // the second product's input
    return t;
  }
  const MoeShape& e = m.moe;
  t.replicated += kFp32 * e.num_experts;   // router logits
  t.moe_replicated += kFp32 * e.num_experts + kBf16 * h;
  t.split += kBf16 * 4.0 * e.shared_ffn * e.shared_experts;
  t.shared += kBf16 * 4.0 * e.shared_ffn * e.shared_experts;
  t.fp8_split += kBf16 * e.shared_ffn * e.shared_experts;
  const double in = e.latent_dim > 0 ? e.latent_dim : h;
  if (e.latent_dim > 0) t.replicated += kBf16 * 2 * e.latent_dim;  // latent in and out
  // Per routed copy: the first product's input, its gate and up output
  // (SwiGLU's input) and the activation (the second product's input); the
  // runtime's experts also keep the expert's output, which they weigh by
  // the router's probability, and the weighted product's input beside it.
  const double f = double(e.expert_ffn) / etp;
  t.routed = experts == ExpertActivations::kMegatron ? kBf16 * (in + 3 * f) + kFp32
                                                    : kBf16 * (2 * in + 4 * f);
  t.routed_act = kBf16 * f;
  t.fp8_routed = kBf16 * (in + f);
  return t;
}

Bytes LayerActivationBytes(const ModelSpec& m, int layer, int seq, int micro_batch,
                           const ParallelPlan& p, bool sp, Recompute r, bool flash,
                           double moe_imbalance, const RecipeOptions& recipe) {
  const double tokens = double(seq) * micro_batch / p.cp;
  const double t = p.tp;
  const double rep_div = sp ? t : 1.0;
  if (r == Recompute::kFull) return Bytes(tokens * kBf16 * m.hidden / rep_div);
  LayerActivationTerms a = LayerActivationTermsOf(m, layer, p.etp, flash, recipe.expert_activations);
  // FP8: the linear layers' saved inputs take one byte, not two.
  if (recipe.fp8 != Fp8Recipe::kNone) {
    a.replicated -= a.fp8_replicated / 2;
    a.split -= a.fp8_split / 2;
    a.routed -= a.fp8_routed / 2;
  }
  // Selective recomputation with modules beyond the attention core (which
  // the terms already price by `flash`): what each module keeps is dropped.
  if (r == Recompute::kSelective) {
    auto dropped = [&](OpModule module) { return RecomputedBy(recipe, module); };
    if (dropped(OpModule::kLayernorm)) a.replicated -= a.norms;
    if (dropped(OpModule::kMlaUpProj)) a.split -= a.mla_up;
    if (dropped(OpModule::kMlp)) a.split -= a.mlp;
    if (dropped(OpModule::kSharedExperts)) a.split -= a.shared;
    if (dropped(OpModule::kMoe)) {
      a.replicated -= a.moe_replicated;
      a.routed = 0;
    } else if (dropped(OpModule::kMoeAct)) {
      a.routed -= a.routed_act;
    }
  }
  double bytes = tokens * (a.replicated / rep_div + a.split / t);
  if (r == Recompute::kNone) bytes += tokens * seq * a.per_seq_token / t;
  if (m.is_moe_layer(layer)) {
    const double copies = tokens * m.moe.top_k * p.etp / t * moe_imbalance;
    bytes += copies * a.routed;
  }
  return Bytes(bytes);
}

std::vector<int> StagesOfRank(ScheduleKind kind, int pp, int stages_per_rank, int rank) {
  std::vector<int> out;
  for (int k = 0; k < (ScheduleIsVShaped(kind) ? 2 : stages_per_rank); ++k) out.push_back(StageOfRank(kind, pp, rank, k));
  return out;
}

int StageOfRank(ScheduleKind kind, int pp, int rank, int k) {
  if (ScheduleIsVShaped(kind)) return k == 0 ? rank : 2 * pp - 1 - rank;
  return rank + k * pp;
}

int AttnResStackColumns(const ModelSpec& m, const StageLayers& st) {
  const int S = m.attn_res_block;
  if (S <= 0) return 0;
  // Columns in the stack before layer l: one per block start below l.
  auto before = [S](int l) { return (l + S - 1) / S; };
  const int received = before(st.first_layer);
  int cols = received;
  for (int l = st.first_layer; l < st.end_layer; ++l)
    if (l % S == 0) cols += before(l) + 1;
  return cols;
}

namespace {

double Adapter(double in, double out, int r) { return r * (in + out); }

double LoraAttentionParams(const ModelSpec& m, AttentionKind kind, int r) {
  const double h = m.hidden, a = m.heads;
  switch (kind) {
    case AttentionKind::kMha:
      return Adapter(h, a * m.head_dim, r) + 2 * Adapter(h, double(m.kv_heads) * m.head_dim, r) +
             Adapter(a * m.head_dim, h, r);
    case AttentionKind::kMla: {
      const MlaShape& s = m.mla;
      const double qk = s.qk_nope_head_dim + s.qk_rope_head_dim;
      const double q = s.q_lora_rank > 0
                           ? Adapter(h, s.q_lora_rank, r) + Adapter(s.q_lora_rank, a * qk, r)
                           : Adapter(h, a * qk, r);
      return q + Adapter(h, s.kv_lora_rank + s.qk_rope_head_dim, r) +
             Adapter(s.kv_lora_rank, a * (s.qk_nope_head_dim + s.v_head_dim), r) +
             Adapter(a * s.v_head_dim, h, r);
    }
    case AttentionKind::kKda: {
      const double dk = m.kda.head_dim_k, dv = m.kda.head_dim_v;
      return 2 * Adapter(h, a * dk, r) + Adapter(h, a * dv, r) + Adapter(a * dv, h, r);
    }
  }
  return 0;
}

/// LoRA parameters of one layer, split into what shards over TP and what
/// shards over EP.
struct LayerLora {
  double tp_sharded = 0;
  double expert_sharded = 0;
};

LayerLora LoraOfLayer(const ModelSpec& m, int layer, const LoraOptions& o) {
  LayerLora l;
  const int r = o.rank;
  if (o.attention) l.tp_sharded += LoraAttentionParams(m, m.attention[layer], r);
  const double h = m.hidden;
  if (!m.is_moe_layer(layer)) {
    if (o.dense_ffn) l.tp_sharded += 3 * Adapter(h, m.dense_ffn, r);
    return l;
  }
  const MoeShape& e = m.moe;
  if (o.dense_ffn) l.tp_sharded += e.shared_experts * 3 * Adapter(h, e.shared_ffn, r);
  if (o.routed_experts) {
    const double in = e.latent_dim > 0 ? e.latent_dim : h;
    if (o.experts == LoraExperts::kPerExpert) {
      l.expert_sharded += e.num_experts * 3 * Adapter(in, e.expert_ffn, r);
    } else {
      // Shared-outer: gate A, up A and down B shared by the layer's experts;
      // each expert keeps its own gate B, up B and down A.
      l.tp_sharded += 3.0 * r * in;
      l.expert_sharded += e.num_experts * 3.0 * r * e.expert_ffn;
    }
  }
  return l;
}

}  // namespace

double LoraParams(const ModelSpec& m, const LoraOptions& lora) {
  double total = 0;
  for (int l = 0; l < m.layers; ++l) {
    LayerLora x = LoraOfLayer(m, l, lora);
    total += x.tp_sharded + x.expert_sharded;
  }
  return total;
}

RankParamSums LayerParamSums(const LayerParams& lp) {
  RankParamSums sums;
  sums.tp_sharded = lp.attention - lp.attention_replicated + lp.dense_ffn + lp.shared_experts;
  sums.replicated = lp.attention_replicated + lp.latent_proj + lp.router + lp.norms;
  sums.expert = lp.routed_experts;
  return sums;
}

RankParamSums ParamSumsOfRank(const PlanRequest& req, const StageSplit& split, const ParamCount& pc,
                              const std::vector<int>& stages) {
  RankParamSums sums;
  const ModelSpec& m = req.model;
  for (int s : stages) {
    const StageLayers& st = split.stages[s];
    for (int l = st.first_layer; l < st.end_layer; ++l) {
      const RankParamSums layer = LayerParamSums(pc.layers[l]);
      sums.tp_sharded += layer.tp_sharded;
      sums.replicated += layer.replicated;
      sums.expert += layer.expert;
      if (req.mode == TrainMode::kLora) {
        LayerLora ll = LoraOfLayer(m, l, req.lora);
        sums.lora_tp_sharded += ll.tp_sharded;
        sums.lora_expert += ll.expert_sharded;
      }
    }
    for (int k = 0; k < st.mtp && k < static_cast<int>(pc.mtp.size()); ++k) {
      const RankParamSums layer = LayerParamSums(pc.mtp[k]);
      sums.tp_sharded += layer.tp_sharded;
      sums.replicated += layer.replicated;
      sums.expert += layer.expert;
    }
    if (st.embedding) sums.tp_sharded += pc.embedding;
    // Tied embeddings: Megatron-LM keeps a copy of the word embeddings on the
    // last stage for the head (and all-reduces its gradient with the first).
    const double head = pc.head > 0 ? pc.head : (st.embedding ? 0 : pc.embedding);
    if (st.head) {
      sums.tp_sharded += head;
      sums.replicated += pc.final_norm;
    }
  }
  return sums;
}

RankParams ShardParams(const RankParamSums& s, const ParallelPlan& p) {
  RankParams rp;
  rp.dense = s.tp_sharded / p.tp + s.replicated;
  rp.expert = s.expert / (double(p.ep) * p.etp);
  rp.lora_dense = s.lora_tp_sharded / p.tp;
  rp.lora_expert = s.lora_expert / (double(p.ep) * p.etp);
  return rp;
}

RankParams ParamsOfRank(const PlanRequest& req, const ParallelPlan& p, const StageSplit& split,
                        const ParamCount& pc, const std::vector<int>& stages) {
  return ShardParams(ParamSumsOfRank(req, split, pc, stages), p);
}

double ExpertBytesPerParam(const ModelSpec& m) {
  return m.storage.routed_expert_bits / 8.0 +
         (m.storage.routed_expert_bits < 16 ? kBf16 / m.storage.quant_group_size : 0.0);
}

namespace {

// kimi-plan run's fp32 states keep fp32 weights, which a bf16 run copies to
// bf16 at use; Megatron's mixed states and a LoRA base are bf16 already.
bool KeepsFp32Weights(const PlanRequest& req) {
  return req.mode == TrainMode::kFull && req.state_precision == StatePrecision::kFp32;
}

// Megatron-LM accumulates and reduces gradients in fp32 under bf16
// (accumulate_allreduce_grads_in_fp32 is forced on), in the parameters' fp16
// under fp16; the fp32 copy the fp16 optimizer makes at its step is transient.
double GradBytesPerParam(const PlanRequest& req) { return req.bf16 && req.recipe.grad_reduce_in_fp32 ? kFp32 : kBf16; }

void FillStates(const PlanRequest& req, const ParallelPlan& p, const RankParams& rp, RoleMemory& r) {
  const double dense_shards = req.distributed_optimizer ? double(p.dp) * p.cp : 1.0;
  const double expert_shards = req.distributed_optimizer ? double(p.edp()) : 1.0;
  if (req.mode == TrainMode::kFull && req.state_precision == StatePrecision::kFp32) {
    // The fp32 weights are the masters; the optimizer keeps the two moments.
    r.weights = Bytes(kFp32 * (rp.dense + rp.expert));
    r.grads = Bytes(kFp32 * (rp.dense + rp.expert));
    r.optimizer = Bytes(2 * kFp32 * (rp.dense / dense_shards + rp.expert / expert_shards));
    return;
  }
  if (req.mode == TrainMode::kFull) {
    // With --fp8-param-gather the model's weights are kept in FP8.
    const double weight_bytes = req.recipe.fp8 != Fp8Recipe::kNone && req.recipe.fp8_param_gather ? 1.0 : kBf16;
    r.weights = Bytes(weight_bytes * (rp.dense + rp.expert));
    r.grads = Bytes(GradBytesPerParam(req) * (rp.dense + rp.expert));
    // fp32 master weights and the two Adam moments (fp32, or bf16).
    const double moments = req.recipe.moments == MomentsDtype::kBf16 ? 2 * kBf16 : 2 * kFp32;
    r.optimizer = Bytes((kFp32 + moments) * (rp.dense / dense_shards + rp.expert / expert_shards));
    return;
  }
  const double expert_base = req.lora.native_base ? ExpertBytesPerParam(req.model) : kBf16;
  const double lora = rp.lora_dense + rp.lora_expert;
  r.weights = Bytes(kBf16 * rp.dense + expert_base * rp.expert + kBf16 * lora);
  r.grads = Bytes(kFp32 * lora);
  r.optimizer = Bytes(3 * kFp32 * (rp.lora_dense / dense_shards + rp.lora_expert / expert_shards));
}

// Whether selective recomputation redoes layer `layer`'s channel mixer (its
// MoE block under moe, its dense MLP under mlp) and the profile measured
// the layers so.
bool MixerRecomputed(const PlanRequest& req, int layer) {
  if (!req.activation_profile || req.activation_profile->layers_ffn_recomputed.empty()) return false;
  return RecomputedBy(req.recipe, req.model.is_moe_layer(layer) ? OpModule::kMoe : OpModule::kMlp);
}

// Whether the plan's selective recomputation redoes a mixer the profile
// measured: its backward figure then includes redoing one.
bool MeasuredMixerRecompute(const PlanRequest& req) {
  if (req.recompute != Recompute::kSelective) return false;
  for (int l = 0; l < req.model.layers; ++l)
    if (MixerRecomputed(req, l)) return true;
  return false;
}

// LayerActivationBytes of one request and plan by layer and recompute,
// each layer shape priced once: a layer's bytes depend on its attention
// kind and whether it is a MoE layer, nothing else of the layer. With an
// activation profile, a layer's measured bytes shrink as its Megatron-LM
// terms do from the measured setting (one rank, no recompute) to the plan's.
class LayerBytes {
 public:
  LayerBytes(const PlanRequest& req, const ParallelPlan& p) : req_(req), p_(p) {}
  Bytes operator()(int layer, Recompute r) {
    const ModelSpec& m = req_.model;
    const int shape = static_cast<int>(m.attention[layer]) * 2 + (m.is_moe_layer(layer) ? 1 : 0);
    std::optional<Bytes>& slot = memo_[shape * 3 + static_cast<int>(r)];
    if (!slot) slot = Terms(layer, p_, req_.sequence_parallel, r);
    if (!req_.activation_profile) return *slot;
    const ActivationProfile& a = *req_.activation_profile;
    // A layer whose channel mixer is recomputed keeps what the profile
    // measured so, shrunk as the selective terms shrink; one that keeps it,
    // what it measured without recomputation.
    const bool mixer = r == Recompute::kSelective && MixerRecomputed(req_, layer);
    const Recompute measured = mixer ? Recompute::kSelective : Recompute::kNone;
    std::optional<Bytes>& one = memo_one_rank_[shape * 2 + (mixer ? 1 : 0)];
    if (!one) one = Terms(layer, ParallelPlan{}, /*sequence_parallel=*/false, measured);
    const double kept = mixer ? a.layers_ffn_recomputed[layer] : a.layers[layer];
    const double per_token = kept * req_.seq_length() * req_.micro_batch * (*slot / *one);
    // What a layer keeps whatever its tokens (a bf16 run's bf16 copies of
    // fp32 weights) is as large as its parameters on the rank, and gone when
    // it is recomputed or when the weights are bf16 already (mixed states,
    // a LoRA base).
    const bool copies = r != Recompute::kFull && KeepsFp32Weights(req_);
    const double fixed = copies ? a.layers_fixed[layer] * ParamShare(layer) : 0.0;
    return Bytes(per_token + fixed);
  }

 private:
  // The share of layer `layer`'s parameters a rank of p_ holds.
  double ParamShare(int layer) {
    if (!counts_) counts_ = CountParams(req_.model);
    const LayerParams& lp = counts_->layers[layer];
    const RankParams on_rank = ShardParams(LayerParamSums(lp), p_);
    return (on_rank.dense + on_rank.expert) / lp.total();
  }
  Bytes Terms(int layer, const ParallelPlan& p, bool sp, Recompute r) const {
    return LayerActivationBytes(req_.model, layer, req_.seq_length(), req_.micro_batch, p, sp, r,
                                req_.flash_attention, req_.efficiency.moe_imbalance, req_.recipe);
  }
  const PlanRequest& req_;
  const ParallelPlan& p_;
  std::optional<Bytes> memo_[3 * 2 * 3];  // attention kinds x MoE or not x recompute settings
  std::optional<Bytes> memo_one_rank_[3 * 2 * 2];  // ... x mixer recomputed or not
  std::optional<ParamCount> counts_;
};

Bytes LogitsBytes(const PlanRequest& req, const ParallelPlan& p) {
  const double tokens = double(req.seq_length()) * req.micro_batch / p.cp;
  // Measured: the head and the loss split by vocabulary over TP.
  if (req.activation_profile)
    return Bytes((req.activation_profile->head * tokens +
                  (KeepsFp32Weights(req) ? req.activation_profile->head_fixed : 0.0)) / p.tp);
  // fp32 logits for the vocabulary-parallel cross entropy and their bf16 gradient.
  return Bytes(tokens * req.model.vocab / p.tp * (kFp32 + kBf16));
}

// The bytes of one activation: the profile's dtype, else bf16.
double ActivationBytes(const PlanRequest& req) {
  return req.activation_profile && req.activation_profile->dtype == "fp32" ? kFp32 : kBf16;
}

Bytes StageActivation(const PlanRequest& req, const ParallelPlan& p, const StageLayers& st, LayerBytes& layer) {
  const ModelSpec& m = req.model;
  const bool groups = req.recompute == Recompute::kFull && req.recompute_method == RecomputeMethod::kUniform;
  double bytes = 0;
  for (int l = st.first_layer; l < st.end_layer; ++l) {
    const int index = l - st.first_layer;
    // A uniform group keeps only its first layer's input.
    if (groups && index % req.recompute_layers != 0) continue;
    bytes += layer(l, LayerRecompute(req, index)).value();
  }
  // An MTP layer keeps what the last decoder layer does (it is one), and the
  // head it runs again keeps its logits.
  for (int k = 0; k < st.mtp; ++k)
    bytes += layer(m.layers - 1, LayerRecompute(req, st.layer_count() + k)).value() + LogitsBytes(req, p).value();
  const double tokens = double(req.seq_length()) * req.micro_batch / p.cp;
  const double column = ActivationBytes(req) * m.hidden * tokens / (req.sequence_parallel ? p.tp : 1);
  if (!req.activation_profile) return Bytes(bytes + AttnResStackColumns(m, st) * column);
  // A measured layer's bytes hold the stack columns it makes; a stage adds
  // the columns it receives, the first stage the embedding's output.
  const int S = m.attn_res_block;
  const int received = S > 0 ? (st.first_layer + S - 1) / S : 0;
  bytes += received * column;
  if (st.first_layer == 0) bytes += req.activation_profile->embedding * tokens / (req.sequence_parallel ? p.tp : 1);
  return Bytes(bytes);
}

// What selective recomputation adds in one stage beyond the chunk it keeps:
// the modules of one layer redone with every activation, once the backward
// has freed what the later layers kept. The attention core alone adds
// nothing: its eager scores are a transient the forward makes too, which
// Megatron's terms (Korthikanti et al., Table 2) leave out, as the runs
// they were checked against bear out; a module's whole MoE block is not.
Bytes SelectiveWorkingSet(const PlanRequest& req, const StageLayers& st, LayerBytes& layer) {
  if (req.recipe.recompute_modules == std::vector<RecomputeModule>{RecomputeModule::kCoreAttn}) return Bytes(0);
  if (MeasuredMixerRecompute(req)) return Bytes(0);  // in the profile's backward figure
  Bytes most, freed;
  for (int l = st.end_layer - 1; l >= st.first_layer; --l) {
    const Bytes kept = layer(l, Recompute::kSelective), whole = layer(l, Recompute::kNone);
    const Bytes dropped = whole > kept ? whole - kept : Bytes(0);
    if (dropped > freed) most = std::max(most, dropped - freed);
    freed += kept;
  }
  return most;
}

// What full recomputation adds in one stage beyond the chunk it keeps: the
// largest group (uniform) or layer (block) it redoes at once, with every
// activation. The backward recomputes a group once every later layer's
// activations are freed; under block those are the layers it keeps whole
// (N onwards), so only what the recomputed layer holds beyond them counts.
Bytes StageWorkingSet(const PlanRequest& req, const StageLayers& st, LayerBytes& layer) {
  if (req.recompute == Recompute::kSelective) return SelectiveWorkingSet(req, st, layer);
  if (req.recompute != Recompute::kFull) return Bytes(0);
  // Uniform redoes a group at a time; block one layer at a time.
  const bool uniform = req.recompute_method == RecomputeMethod::kUniform;
  const int group = uniform ? req.recompute_layers : 1;
  const int end = uniform ? st.end_layer : std::min(st.end_layer, st.first_layer + req.recompute_layers);
  Bytes most;
  for (int g = st.first_layer; g < end; g += group) {
    Bytes sum;
    for (int l = g; l < std::min(end, g + group); ++l) sum += layer(l, Recompute::kNone);
    most = std::max(most, sum);
  }
  Bytes freed;
  for (int l = end; l < st.end_layer; ++l) freed += layer(l, Recompute::kNone);
  return most > freed ? most - freed : Bytes(0);
}

}  // namespace

Bytes LayerActivationBytesOf(const PlanRequest& req, const ParallelPlan& p, int layer) {
  LayerBytes bytes(req, p);
  return bytes(layer, req.recompute);
}

Bytes StageActivationBytes(const PlanRequest& req, const ParallelPlan& p, const StageLayers& st) {
  LayerBytes layer(req, p);
  return StageActivation(req, p, st, layer);
}

Bytes RecomputeWorkingSet(const PlanRequest& req, const ParallelPlan& p, const StageSplit& split,
                          const std::vector<int>& stages) {
  LayerBytes layer(req, p);
  Bytes most;
  for (int s : stages) most = std::max(most, StageWorkingSet(req, split.stages[s], layer));
  return most;
}

namespace {

Bytes LargestLayerActivation(const PlanRequest& req, LayerBytes& layer) {
  Bytes best;
  for (int l = 0; l < req.model.layers; ++l) best = std::max(best, layer(l, Recompute::kNone));
  return best;
}

Bytes DispatchBuffers(const PlanRequest& req, const ParallelPlan& p) {
  const ModelSpec& m = req.model;
  if (!m.is_moe() || p.ep * p.etp == 1) return Bytes(0);
  const double tokens = double(req.seq_length()) * req.micro_batch / p.cp;
  const double copies = tokens * m.moe.top_k * p.etp / p.tp * req.efficiency.moe_imbalance;
  const double in = m.moe.latent_dim > 0 ? m.moe.latent_dim : m.hidden;
  return Bytes(2 * copies * kBf16 * in);  // the exchanges' send and receive buffers (ETP: the gathered rows)
}

// The actor on pipeline rank `rank`, whose parameters are `params`; the
// readable parts (RoleMemory::details) only when `details` is set, as a
// report names only its worst rank's.
RoleMemory ActorOnRank(const PlanRequest& req, const ParallelPlan& p, const StageSplit& split,
                       const RankParams& params, int rank, LayerBytes& layer, bool details) {
  RoleMemory r;
  r.rank = rank;
  const int spr = StagesPerRank(req.schedule, p.vp);
  FillStates(req, p, params, r);

  const int microbatches = static_cast<int>(req.sequences() / (p.dp * req.micro_batch));
  Bytes chunk, working;
  bool has_head = false;
  for (int k = 0; k < spr; ++k) {
    const StageLayers& st = split.stages[StageOfRank(req.schedule, p.pp, rank, k)];
    chunk = std::max(chunk, StageActivation(req, p, st, layer));
    working = std::max(working, StageWorkingSet(req, st, layer));
    has_head |= st.head;
  }
  const int inflight = PeakInflightChunks(req.schedule, p.pp, spr, microbatches, rank);
  r.activations = chunk * inflight;
  if (details) r.details.push_back({"in-flight chunks x " + std::to_string(inflight), r.activations});
  if (working.value() > 0) {
    r.activations += working;
    if (details) r.details.push_back({"recompute working set", working});
  }
  if (req.activation_profile) {
    const double tokens = double(req.seq_length()) * req.micro_batch / (double(p.cp) * p.tp);
    const ActivationProfile& a = *req.activation_profile;
    const Bytes backward((MeasuredMixerRecompute(req) ? a.backward_ffn_recomputed : a.backward) * tokens);
    r.activations += backward;
    if (details) r.details.push_back({"backward working set (measured)", backward});
  }
  if (has_head) {
    const Bytes logits = LogitsBytes(req, p);
    r.activations += logits;
    if (details) r.details.push_back({"logits", logits});
  }
  const Bytes dispatch = DispatchBuffers(req, p);
  r.other = dispatch + kRuntimeReserve;
  // The reduction runs once the backward has freed the activations: it
  // raises the peak only by what its bucket holds beyond them. The TP
  // partial sums and the replicas' all-reduce go through buckets; the
  // distributed optimizer's reduce-scatter sums each owned part in place.
  const bool bucketed = p.tp > 1 || (p.dp * p.cp > 1 && !req.distributed_optimizer);
  const Bytes bucket = bucketed ? std::min(req.gradient_bucket, r.grads) : Bytes(0);
  if (bucket > r.activations + dispatch) {
    const Bytes beyond = bucket - r.activations - dispatch;
    r.other += beyond;
    if (details) r.details.push_back({"gradient bucket beyond the activations", beyond});
  }
  if (details && dispatch.value() > 0) r.details.push_back({"MoE dispatch buffers", dispatch});
  if (details) r.details.push_back({"CUDA/NCCL reserve", kRuntimeReserve});
  r.capacity = req.gpu.memory;
  return r;
}

RoleMemory Reference(const PlanRequest& req, const RankParams& params, int rank, Bytes largest_layer,
                     const ParallelPlan& p, bool details) {
  RoleMemory r;
  r.rank = rank;
  r.capacity = req.gpu.memory;
  // Under LoRA the self-teacher is the actor with its adapters switched off:
  // no second copy of the base.
  if (req.mode == TrainMode::kFull) r.weights = Bytes(kBf16 * (params.dense + params.expert));
  r.activations = largest_layer + LogitsBytes(req, p);
  if (details) r.details.push_back({"one layer + logits, forward only", r.activations});
  return r;
}

/// KV cache of one full-length sequence on one GPU of a rollout engine.
Bytes KvPerSequence(const PlanRequest& req, const ParallelPlan& p) {
  const ModelSpec& m = req.model;
  const double tokens = req.seq_length();
  const double t = p.rollout_tp;
  double bytes = 0;
  for (int l = 0; l < m.layers; ++l) {
    switch (m.attention[l]) {
      case AttentionKind::kMha:
        bytes += tokens * 2 * kBf16 * m.kv_heads * m.head_dim / std::min<double>(t, m.kv_heads);
        break;
      case AttentionKind::kMla:  // the latent is shared by all heads, so every TP rank keeps it whole
        bytes += tokens * kBf16 * (m.mla.kv_lora_rank + m.mla.qk_rope_head_dim);
        break;
      case AttentionKind::kKda: {  // a fixed-size recurrent state and the convolution tails
        const double a = m.heads, dk = m.kda.head_dim_k, dv = m.kda.head_dim_v;
        bytes += (kFp32 * a * dk * dv + kBf16 * (m.kda.conv_kernel - 1) * a * (2 * dk + dv)) / t;
        break;
      }
    }
  }
  return Bytes(bytes);
}

RoleMemory Rollout(const PlanRequest& req, const ParallelPlan& p, const ParamCount& pc) {
  const ModelSpec& m = req.model;
  RoleMemory r;
  const double routed = pc.sum.routed_experts;
  const double rest = pc.total - routed;
  r.weights = Bytes(kBf16 * rest / p.rollout_tp + ExpertBytesPerParam(m) * routed / p.rollout_ep);
  const double tokens = kRolloutBatchedTokens;
  r.activations = Bytes(tokens * (16.0 * kBf16 * m.hidden + kFp32 * m.vocab / p.rollout_tp));
  r.details.push_back({"forward workspace (" + std::to_string(kRolloutBatchedTokens) + " tokens)", r.activations});
  const double util = req.placement == Placement::kColocated ? req.gpu_memory_utilization : kSplitRolloutUtilization;
  r.capacity = req.gpu.memory * util;
  const Bytes kv = r.capacity - r.weights - r.activations - kRuntimeReserve;
  r.other = std::max(Bytes(0), kv) + kRuntimeReserve;
  r.details.push_back({"KV cache (fills the budget)", std::max(Bytes(0), kv)});
  r.details.push_back({"CUDA/NCCL reserve", kRuntimeReserve});
  return r;
}

std::string Over(const std::string& role, const RoleMemory& r, const GpuSpec& gpu, const std::string& what) {
  return role + ": needs " + FormatGB(r.total().value()) + " on pipeline rank " + std::to_string(r.rank) +
         ", " + what + " " + FormatGB(r.capacity.value()) + " (over by " +
         FormatGB((r.total() - r.capacity).value()) + ")";
}

}  // namespace

std::vector<RankParams> ParamsOfRanks(const PlanRequest& req, const ParallelPlan& p, const StageSplit& split,
                                      const ParamCount& pc) {
  const int spr = StagesPerRank(req.schedule, p.vp);
  std::vector<RankParams> out;
  for (int rank = 0; rank < p.pp; ++rank)
    out.push_back(ParamsOfRank(req, p, split, pc, StagesOfRank(req.schedule, p.pp, spr, rank)));
  return out;
}

Bytes ActorMemoryFloor(const PlanRequest& req, const ParallelPlan& p, const StageSplit& split,
                       const ParamCount& pc) {
  return ActorMemoryFloor(req, p, ParamsOfRanks(req, p, split, pc));
}

Bytes ActorMemoryFloor(const PlanRequest& req, const ParallelPlan& p, const std::vector<RankParams>& ranks) {
  Bytes most;
  for (const RankParams& rp : ranks) {
    RoleMemory r;
    FillStates(req, p, rp, r);
    most = std::max(most, r.weights + r.grads + r.optimizer);
  }
  // ActorOnRank's `other` is the dispatch buffers plus this reserve.
  return most + kRuntimeReserve;
}

Bytes HeadroomCeiling(const PlanRequest& req, const ParallelPlan& p, const std::vector<RankParams>& ranks) {
  Bytes most_states, least_states, reference;
  for (size_t i = 0; i < ranks.size(); ++i) {
    RoleMemory r;
    FillStates(req, p, ranks[i], r);
    const Bytes states = r.weights + r.grads + r.optimizer;
    most_states = std::max(most_states, states);
    if (i == 0 || states < least_states) least_states = states;
    if (req.mode == TrainMode::kFull) reference = std::max(reference, Bytes(kBf16 * (ranks[i].dense + ranks[i].expert)));
  }
  // most_states + the reserve is ActorMemoryFloor.
  Bytes peak = most_states + kRuntimeReserve + reference;
  if (req.placement == Placement::kColocated)
    peak = std::max(peak, least_states + reference + req.gpu.memory * req.gpu_memory_utilization);
  // Reference::weights is the heaviest rank's up to rounding in the
  // comparison that picks it: shaved, as a ceiling may only be higher.
  return req.gpu.memory - peak * (1 - 1e-9);
}

MemoryReport EstimateMemory(const PlanRequest& req, const ParallelPlan& p, const StageSplit& split,
                            const ParamCount& pc, const std::vector<RankParams>* ranks) {
  MemoryReport out;
  const std::vector<RankParams> own = ranks ? std::vector<RankParams>() : ParamsOfRanks(req, p, split, pc);
  const std::vector<RankParams>& params = ranks ? *ranks : own;
  LayerBytes layer(req, p);
  const Bytes largest = LargestLayerActivation(req, layer);
  int worst_actor = 0, worst_reference = 0;
  Bytes actor_total, reference_total;
  for (int rank = 0; rank < p.pp; ++rank) {
    const Bytes a = ActorOnRank(req, p, split, params[rank], rank, layer, false).total();
    out.actor_by_rank.push_back(a);
    if (rank == 0 || a > actor_total) {
      actor_total = a;
      worst_actor = rank;
    }
    const Bytes ref = Reference(req, params[rank], rank, largest, p, false).total();
    if (rank == 0 || ref > reference_total) {
      reference_total = ref;
      worst_reference = rank;
    }
  }
  out.actor = ActorOnRank(req, p, split, params[worst_actor], worst_actor, layer, true);
  out.reference = Reference(req, params[worst_reference], worst_reference, largest, p, true);
  out.rollout = Rollout(req, p, pc);
  out.rollout_kv_per_sequence = KvPerSequence(req, p);
  const Bytes kv_budget = out.rollout.other - kRuntimeReserve;
  out.rollout_concurrency = kv_budget / out.rollout_kv_per_sequence;

  const std::string gpu = req.gpu.name;
  if (!out.actor.fits()) out.violations.push_back(Over("actor", out.actor, req.gpu, "the " + gpu + " has"));
  const Bytes needed_rollout = out.rollout.weights + out.rollout.activations + kRuntimeReserve + out.rollout_kv_per_sequence;
  if (needed_rollout > out.rollout.capacity)
    out.violations.push_back("rollout: weights, workspace and one " + std::to_string(req.seq_length()) +
                             "-token sequence's KV need " + FormatGB(needed_rollout.value()) +
                             " per GPU, its budget is " + FormatGB(out.rollout.capacity.value()) +
                             " (over by " + FormatGB((needed_rollout - out.rollout.capacity).value()) + ")");

  const Bytes resident = out.actor.weights + out.actor.grads + out.actor.optimizer + out.reference.weights;
  if (req.placement == Placement::kColocated) {
    out.phases.train = out.actor.total() + out.reference.weights;
    out.phases.reference = resident + out.reference.activations + kRuntimeReserve;
    out.phases.rollout = resident + out.rollout.capacity;
    const std::pair<const char*, Bytes> phases[] = {{"training", out.phases.train},
                                                    {"reference", out.phases.reference},
                                                    {"rollout", out.phases.rollout}};
    for (const auto& [name, peak] : phases)
      if (peak > req.gpu.memory)
        out.violations.push_back(std::string("colocated ") + name + " phase: needs " + FormatGB(peak.value()) +
                                 ", the " + gpu + " has " + FormatGB(req.gpu.memory.value()) + " (over by " +
                                 FormatGB((peak - req.gpu.memory).value()) + ")");
  } else {
    const Bytes with_ref = out.actor.total() + out.reference.weights;
    if (with_ref > req.gpu.memory && out.actor.fits())
      out.violations.push_back("actor + reference: need " + FormatGB(with_ref.value()) + ", the " + gpu +
                               " has " + FormatGB(req.gpu.memory.value()));
  }
  return out;
}

}  // namespace kp
