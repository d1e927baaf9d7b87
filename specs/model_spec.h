// The shape of a model: everything the planner, the simulator and the
// runtime need to know about it, and the parameter counts derived from it.
// A ModelSpec is plain data; Validate() states which shapes are well formed.
#ifndef KIMI_PLAN_SPECS_MODEL_SPEC_H_
#define KIMI_PLAN_SPECS_MODEL_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace kp {

enum class AttentionKind { kMha, kMla, kKda };
const char* AttentionKindName(AttentionKind k);

/// Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): low-rank q and kv.
struct MlaShape {
  int q_lora_rank = 0;  ///< 0 means a full-rank q projection
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  /// A sigmoid output gate: the attention output times sigmoid(W_gate x),
  /// W_gate [heads x v_head_dim, hidden] (kimi-k3-debug; docs/presets.md).
  /// DeepSeek-V3's MLA (Kimi K2.6) has none.
  bool output_gate = false;
};

/// Kimi Delta Attention (Kimi Linear): linear attention with a matrix state
/// of head_dim_k x head_dim_v per head, short convolutions on q/k/v, a
/// low-rank per-channel forget gate, a per-head beta and a low-rank output gate.
struct KdaShape {
  int head_dim_k = 0;
  int head_dim_v = 0;
  int conv_kernel = 4;
};

/// Mixture of experts. num_experts == 0 means every layer is dense.
struct MoeShape {
  int num_experts = 0;
  int top_k = 0;
  int expert_ffn = 0;       ///< SwiGLU intermediate size of one routed expert
  int shared_experts = 0;
  int shared_ffn = 0;       ///< intermediate size of one shared expert
  int latent_dim = 0;       ///< LatentMoE: routed experts run in this width; 0 = off
  /// The routed experts' weights are normalised over the top_k and then
  /// multiplied by this (DeepSeek-V3's routed_scaling_factor: 2.5; Kimi K2.x 2.827).
  double route_scale = 2.5;
  /// Group-limited routing (DeepSeek-V3's n_group / topk_group): the experts
  /// form `groups` equal groups, each scored by the sum of its two best
  /// biased scores, and only the `topk_groups` best groups may be chosen.
  /// 1 / 1 (Kimi K2.x): every expert competes.
  int groups = 1;
  int topk_groups = 1;
};

/// YaRN context extension of RoPE (Peng et al. 2023, as DeepSeek-V3 and Kimi
/// K2 configure it). factor 0: plain RoPE.
struct YarnScaling {
  double factor = 0;
  int original_max_positions = 4096;
  double beta_fast = 32;
  double beta_slow = 1;
  double mscale = 1;
  double mscale_all_dim = 0;
  bool enabled() const { return factor > 0; }
};

/// Rotary position embedding as the released weights expect it. Only the
/// runtime reads it; no cost the planner models depends on it.
struct RopeSpec {
  double theta = 10000.0;
  /// The rotary channels of q and k are rotated in adjacent pairs (0,1),
  /// (2,3), ... (DeepSeek-V3's and Kimi K2's released weights, HF's
  /// rope_interleave) rather than as the two halves (Llama's layout).
  bool interleaved = false;
  YarnScaling yarn;
};

/// How the weights are stored when they are synced to rollout workers.
struct StorageFormat {
  int routed_expert_bits = 16;  ///< 4 for Kimi K2.6's native INT4 experts
  int quant_group_size = 32;    ///< one bf16 scale per group of this many weights
};

struct ModelSpec {
  std::string name;
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int head_dim = 0;      ///< MHA/GQA only
  int kv_heads = 0;      ///< MHA/GQA only; == heads for plain MHA
  int vocab = 0;
  int dense_layers = 0;  ///< the first this-many layers use a dense FFN
  int dense_ffn = 0;
  bool tied_embeddings = false;
  /// SwiGLU FFNs (three matrices) when true; GPT-style GeLU (two) when false.
  bool gated_ffn = true;
  /// GPT-3 style dropout after attention and FFN (Korthikanti et al. count
  /// its 1-byte masks); modern MoE models train without.
  bool dropout = false;
  /// The attention kind of every layer, derived from pattern and tail.
  std::vector<AttentionKind> attention;
  MlaShape mla;
  KdaShape kda;
  MoeShape moe;
  int attn_res_block = 0;  ///< Block Attention Residual block size; 0 = plain residual
  /// Multi-token-prediction layers (DeepSeek-V3's MTP module: the two
  /// inputs' norms, the 2h -> h projection and one decoder layer like the
  /// last, sharing the embedding and the head, whose logits and loss it runs
  /// again). Megatron-LM's mtp_num_layers; 0: none.
  int mtp_layers = 0;
  StorageFormat storage;
  RopeSpec rope;
  double norm_eps = 1e-6;  ///< every RMSNorm's epsilon (HF's rms_norm_eps)

  bool is_moe() const { return moe.num_experts > 0; }
  bool is_moe_layer(int layer) const { return is_moe() && layer >= dense_layers; }
  int moe_layer_count() const { return is_moe() ? layers - dense_layers : 0; }
  int count(AttentionKind k) const;
  /// Number of attention-residual blocks (the last may be partial).
  int attn_res_blocks() const;

  /// Checks every field; the message names the field and what is allowed.
  Status Validate() const;
};

/// Builds the per-layer attention list from a repeating pattern and a tail
/// (Kimi K3: (3 KDA + 1 MLA) repeated, then one closing MLA).
Result<std::vector<AttentionKind>> ExpandAttentionPattern(
    int layers, const std::vector<AttentionKind>& pattern,
    const std::vector<AttentionKind>& tail);

}  // namespace kp

#endif  // KIMI_PLAN_SPECS_MODEL_SPEC_H_
