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
  return q + kv + o;
}

// Kimi Linear's KDA layer: q/k/v/o projections, depthwise short convolutions
// on q, k and v, the forget gate as a low-rank (hidden -> dk -> H*dk)
// projection, beta as one scalar per head, the output gate low-rank
// (hidden -> dv -> H*dv), per-head decay parameters and the gated norm weight.
double KdaParams(const ModelSpec& m) {
  const double h = m.hidden, H = m.heads, dk = m.kda.head_dim_k, dv = m.kda.head_dim_v;
  const double qkvo = h * H * dk * 2 + h * H * dv + H * dv * h;
  const double conv = m.kda.conv_kernel * (2 * H * dk + H * dv);
  const double forget = h * dk + dk * H * dk;
  const double beta = h * H;
  const double out_gate = h * dv + dv * H * dv;
  const double decay_and_norm = H + dv;
  return qkvo + conv + forget + beta + out_gate + decay_and_norm;
}

namespace {

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
  // Two RMSNorms; with attention residuals each of the two depth reads adds a
  // learned query vector and the RMSNorm weight applied to the stack.
  p.norms = 2 * h + (m.attn_res_block > 0 ? 4 * h : 0);
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
  return c;
}

}  // namespace kp
