#include "specs/param_count.h"

namespace kp {

double SwigluParams(int in, int ffn) { return 3.0 * in * ffn; }

double MhaParams(const ModelSpec& m) {
  const double h = m.hidden, q = double(m.heads) * m.head_dim, kv = double(m.kv_heads) * m.head_dim;
  return h * q + 2 * h * kv + q * h;
}

double MlaParams(const ModelSpec& m) {
  const double h = m.hidden, H = m.heads;
  const MlaShape& s = m.mla;
  const double qk = s.qk_nope_head_dim + s.qk_rope_head_dim;
  const double q = s.q_lora_rank > 0 ? h * s.q_lora_rank + s.q_lora_rank + s.q_lora_rank * H * qk
                                     : h * H * qk;
  const double kv = h * (s.kv_lora_rank + s.qk_rope_head_dim) + s.kv_lora_rank +
                    double(s.kv_lora_rank) * H * (s.qk_nope_head_dim + s.v_head_dim);
  const double o = H * s.v_head_dim * h;
  const double gate = s.output_gate ? h * H * s.v_head_dim : 0;
  return q + kv + o + gate;
}

// Kimi Linear's KDA layer: q/k/v/o projections, depthwise short convolutions
// on q, k and v, the forget gate as a low-rank (hidden -> dk -> H*dk)
// projection, beta as one scalar per head, the output gate low-rank
// (hidden -> dv -> H*dv), the per-head decay A, the per-channel dt bias of the
// forget gate and the gated norm weight.
double KdaParams(const ModelSpec& m) {
  const double h = m.hidden, H = m.heads, dk = m.kda.head_dim_k, dv = m.kda.head_dim_v;
  const double qkvo = h * H * dk * 2 + h * H * dv + H * dv * h;
  const double conv = m.kda.conv_kernel * (2 * H * dk + H * dv);
  const double forget = h * dk + dk * H * dk;
  const double beta = h * H;
  const double out_gate = h * dv + dv * H * dv;
  const double decay_and_norm = H + H * dk + dv;
  return qkvo + conv + forget + beta + out_gate + decay_and_norm;
}

namespace {

// What MlaParams and KdaParams count that every TP rank keeps whole.
double AttentionReplicatedParams(const ModelSpec& m, AttentionKind k) {
  const double h = m.hidden;
  switch (k) {
    case AttentionKind::kMha: return 0;
    case AttentionKind::kMla: {
      const MlaShape& s = m.mla;
      const double q_down = s.q_lora_rank > 0 ? h * s.q_lora_rank + s.q_lora_rank : 0;
      return q_down + h * (s.kv_lora_rank + s.qk_rope_head_dim) + s.kv_lora_rank;
    }
    case AttentionKind::kKda: return h * m.kda.head_dim_k + h * m.kda.head_dim_v + m.kda.head_dim_v;
  }
  return 0;
}

double AttentionParams(const ModelSpec& m, AttentionKind k) {
  switch (k) {
    case AttentionKind::kMha: return MhaParams(m);
    case AttentionKind::kMla: return MlaParams(m);
    case AttentionKind::kKda: return KdaParams(m);
  }
  return 0;
}

LayerParams CountLayer(const ModelSpec& m, int layer) {
  LayerParams p;
  const double h = m.hidden;
  p.attention = AttentionParams(m, m.attention[layer]);
  p.attention_replicated = AttentionReplicatedParams(m, m.attention[layer]);
  // Two RMSNorms; with attention residuals each of the two depth reads adds a
  // learned query vector and the RMSNorm weight applied to the stack. Layer
  // 0's attention read would be over the embedding alone, the identity: it
  // has no parameters.
  const int depth_reads = m.attn_res_block > 0 ? (layer > 0 ? 2 : 1) : 0;
  p.norms = 2 * h + depth_reads * 2 * h;
  if (m.is_moe_layer(layer)) {
    const int expert_in = m.moe.latent_dim > 0 ? m.moe.latent_dim : m.hidden;
    p.routed_expert = SwigluParams(expert_in, m.moe.expert_ffn);
    p.routed_experts = p.routed_expert * m.moe.num_experts;
    p.shared_experts = m.moe.shared_experts * SwigluParams(m.hidden, m.moe.shared_ffn);
    p.latent_proj = m.moe.latent_dim > 0 ? 2 * h * m.moe.latent_dim : 0;
    p.router = h * m.moe.num_experts + m.moe.num_experts;
  } else {
    p.dense_ffn = m.gated_ffn ? SwigluParams(m.hidden, m.dense_ffn) : 2.0 * m.hidden * m.dense_ffn;
  }
  return p;
}

void Accumulate(LayerParams& into, const LayerParams& p) {
  into.attention += p.attention;
  into.attention_replicated += p.attention_replicated;
  into.dense_ffn += p.dense_ffn;
  into.routed_expert += p.routed_expert;
  into.routed_experts += p.routed_experts;
  into.shared_experts += p.shared_experts;
  into.latent_proj += p.latent_proj;
  into.router += p.router;
  into.norms += p.norms;
}

}  // namespace

ParamCount CountParams(const ModelSpec& m) {
  ParamCount c;
  const double h = m.hidden;
  c.embedding = double(m.vocab) * h;
  c.head = m.tied_embeddings ? 0 : double(m.vocab) * h;
  c.final_norm = h + (m.attn_res_block > 0 ? 2 * h : 0);
  c.total = c.embedding + c.head + c.final_norm;
  c.active = c.total;
  for (int l = 0; l < m.layers; ++l) {
    LayerParams p = CountLayer(m, l);
    c.total += p.total();
    c.active += p.active(m.moe.top_k);
    Accumulate(c.sum, p);
    c.layers.push_back(p);
  }
  for (int k = 0; k < m.mtp_layers && m.layers > 0; ++k) {
    LayerParams p = c.layers.back();
    p.attention += 2 * h * h;
    p.norms += 2 * h;
    c.total += p.total();
    c.mtp.push_back(p);
  }
  return c;
}

}  // namespace kp
