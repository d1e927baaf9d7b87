// Small model shapes for the runtime tests: every feature of Kimi K3 (KDA,
// MLA, dense and MoE FFNs, LatentMoE, shared experts, Block Attention
// Residuals with a partial last block) at a size that trains in seconds.
#ifndef KIMI_PLAN_RUNTIME_MODEL_TEST_UTIL_H_
#define KIMI_PLAN_RUNTIME_MODEL_TEST_UTIL_H_

#include "runtime/model/runtime_config.h"
#include "specs/model_spec.h"
#include "specs/presets.h"

namespace kp::runtime {

/// 5 layers (KDA KDA MLA KDA MLA), blocks of 2 (the last one partial),
/// dense layer 0, 4 experts top-2 in a latent of 16, one shared expert.
inline ModelSpec TinyKimiSpec() {
  ModelSpec m;
  m.name = "tiny-kimi";
  m.layers = 5;
  m.hidden = 32;
  m.heads = 2;
  m.vocab = 48;
  m.dense_layers = 1;
  m.dense_ffn = 48;
  using K = AttentionKind;
  m.attention = {K::kKda, K::kKda, K::kMla, K::kKda, K::kMla};
  m.mla.q_lora_rank = 0;
  m.mla.kv_lora_rank = 16;
  m.mla.qk_nope_head_dim = 8;
  m.mla.qk_rope_head_dim = 4;
  m.mla.v_head_dim = 8;
  m.mla.output_gate = true;
  m.kda.head_dim_k = 8;
  m.kda.head_dim_v = 8;
  m.kda.conv_kernel = 3;
  m.moe.num_experts = 4;
  m.moe.top_k = 2;
  m.moe.expert_ffn = 16;
  m.moe.shared_experts = 1;
  m.moe.shared_ffn = 16;
  m.moe.latent_dim = 16;
  m.attn_res_block = 2;
  return m;
}

/// A plain-residual GPT: two MHA layers, grouped-query (4 heads, 2 key-value
/// heads), ungated dense FFNs.
inline ModelSpec TinyGptSpec() {
  ModelSpec m;
  m.name = "gpt-tiny";
  m.layers = 2;
  m.hidden = 16;
  m.heads = 4;
  m.head_dim = 4;
  m.kv_heads = 2;
  m.vocab = 20;
  m.dense_layers = 2;
  m.dense_ffn = 32;
  m.gated_ffn = false;
  m.attention = {AttentionKind::kMha, AttentionKind::kMha};
  return m;
}

/// The kimi-k2.6 preset scaled to 3 layers (the dense first, two MoE), two
/// heads, 4 routed experts and a vocabulary of 128 at `hidden` (its widths
/// follow: hidden 224 gives K2.6's expert FFN as 64, whole INT4 groups).
inline ModelSpec ScaledKimiK26Spec(int hidden) {
  RealFileSystem fs;
  const PresetCatalog catalog(fs, DefaultPresetDir());
  ScaleFlags scale;
  scale.layers = 3, scale.hidden = hidden, scale.heads = 2, scale.experts = 4, scale.vocab = 128;
  return ScaleModel(*catalog.Model("kimi-k2.6"), scale).value();
}

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_MODEL_TEST_UTIL_H_
