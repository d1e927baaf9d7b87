#include "specs/model_spec.h"

#include <algorithm>

namespace kp {

const char* AttentionKindName(AttentionKind k) {
  switch (k) {
    case AttentionKind::kMha: return "mha";
    case AttentionKind::kMla: return "mla";
    case AttentionKind::kKda: return "kda";
  }
  return "?";
}

int ModelSpec::count(AttentionKind k) const {
  return static_cast<int>(std::count(attention.begin(), attention.end(), k));
}

int ModelSpec::attn_res_blocks() const {
  if (attn_res_block <= 0) return 0;
  return (layers + attn_res_block - 1) / attn_res_block;
}

namespace {

Status Positive(const std::string& field, long long v) {
  if (v > 0) return Status::Ok();
  return Status::InvalidArgument(field + ": must be a positive integer, got " + std::to_string(v));
}

Status NonNegative(const std::string& field, long long v) {
  if (v >= 0) return Status::Ok();
  return Status::InvalidArgument(field + ": must be >= 0, got " + std::to_string(v));
}

Status ValidateGroups(const MoeShape& moe) {
  KP_RETURN_IF_ERROR(Positive("moe.groups", moe.groups));
  KP_RETURN_IF_ERROR(Positive("moe.topk_groups", moe.topk_groups));
  if (!(moe.route_scale > 0))
    return Status::InvalidArgument("moe.route_scale: must be > 0, got " + std::to_string(moe.route_scale));
  if (moe.groups == 1) {
    if (moe.topk_groups != 1) return Status::InvalidArgument("moe.topk_groups: must be 1 when moe.groups is 1");
    return Status::Ok();
  }
  const int per_group = moe.num_experts / moe.groups;
  // A group is scored by its two best experts, so each needs two.
  if (moe.num_experts % moe.groups != 0 || per_group < 2)
    return Status::InvalidArgument("moe.groups: must divide moe.num_experts (" + std::to_string(moe.num_experts) +
                                   ") into groups of at least 2, got " + std::to_string(moe.groups));
  if (moe.topk_groups > moe.groups)
    return Status::InvalidArgument("moe.topk_groups: must be <= moe.groups (" + std::to_string(moe.groups) + ")");
  if (moe.top_k > moe.topk_groups * per_group)
    return Status::InvalidArgument("moe.top_k: must be <= moe.topk_groups x experts per group (" +
                                   std::to_string(moe.topk_groups * per_group) + ")");
  return Status::Ok();
}

Status ValidateRope(const RopeSpec& rope) {
  if (!(rope.theta > 1)) return Status::InvalidArgument("rope.theta: must be > 1, got " + std::to_string(rope.theta));
  const YarnScaling& y = rope.yarn;
  if (!y.enabled()) return Status::Ok();
  if (!(y.factor >= 1))
    return Status::InvalidArgument("rope.yarn.factor: must be >= 1 (or 0 for no YaRN), got " + std::to_string(y.factor));
  KP_RETURN_IF_ERROR(Positive("rope.yarn.original_max_positions", y.original_max_positions));
  if (!(y.beta_fast > 0 && y.beta_slow > 0))
    return Status::InvalidArgument("rope.yarn.beta_fast, rope.yarn.beta_slow: must be > 0");
  if (!(y.mscale >= 0 && y.mscale_all_dim >= 0))
    return Status::InvalidArgument("rope.yarn.mscale, rope.yarn.mscale_all_dim: must be >= 0");
  return Status::Ok();
}

}  // namespace

Status ModelSpec::Validate() const {
  KP_RETURN_IF_ERROR(Positive("layers", layers));
  KP_RETURN_IF_ERROR(Positive("hidden", hidden));
  KP_RETURN_IF_ERROR(Positive("heads", heads));
  KP_RETURN_IF_ERROR(Positive("vocab", vocab));
  KP_RETURN_IF_ERROR(NonNegative("dense_layers", dense_layers));
  KP_RETURN_IF_ERROR(NonNegative("attn_res_block", attn_res_block));
  KP_RETURN_IF_ERROR(NonNegative("mtp_layers", mtp_layers));
  if (static_cast<int>(attention.size()) != layers)
    return Status::InvalidArgument("attention: pattern gives " + std::to_string(attention.size()) +
                                   " layers, the model has " + std::to_string(layers));
  if (count(AttentionKind::kMha) > 0) {
    KP_RETURN_IF_ERROR(Positive("head_dim", head_dim));
    KP_RETURN_IF_ERROR(Positive("kv_heads", kv_heads));
    if (heads % kv_heads != 0)
      return Status::InvalidArgument("kv_heads: must divide heads (" + std::to_string(heads) + ")");
  }
  if (count(AttentionKind::kMla) > 0) {
    KP_RETURN_IF_ERROR(NonNegative("mla.q_lora_rank", mla.q_lora_rank));
    KP_RETURN_IF_ERROR(Positive("mla.kv_lora_rank", mla.kv_lora_rank));
    KP_RETURN_IF_ERROR(Positive("mla.qk_nope_head_dim", mla.qk_nope_head_dim));
    KP_RETURN_IF_ERROR(NonNegative("mla.qk_rope_head_dim", mla.qk_rope_head_dim));
    KP_RETURN_IF_ERROR(Positive("mla.v_head_dim", mla.v_head_dim));
  }
  if (count(AttentionKind::kKda) > 0) {
    KP_RETURN_IF_ERROR(Positive("kda.head_dim_k", kda.head_dim_k));
    KP_RETURN_IF_ERROR(Positive("kda.head_dim_v", kda.head_dim_v));
    KP_RETURN_IF_ERROR(Positive("kda.conv_kernel", kda.conv_kernel));
  }
  if (dense_layers > layers)
    return Status::InvalidArgument("dense_layers: must be <= layers (" + std::to_string(layers) + ")");
  if (dense_layers > 0 || !is_moe()) KP_RETURN_IF_ERROR(Positive("dense_ffn", dense_ffn));
  if (is_moe()) {
    KP_RETURN_IF_ERROR(Positive("moe.top_k", moe.top_k));
    KP_RETURN_IF_ERROR(Positive("moe.expert_ffn", moe.expert_ffn));
    KP_RETURN_IF_ERROR(NonNegative("moe.shared_experts", moe.shared_experts));
    KP_RETURN_IF_ERROR(NonNegative("moe.latent_dim", moe.latent_dim));
    if (moe.top_k > moe.num_experts)
      return Status::InvalidArgument("moe.top_k: must be <= moe.num_experts (" +
                                     std::to_string(moe.num_experts) + ")");
    if (moe.shared_experts > 0) KP_RETURN_IF_ERROR(Positive("moe.shared_ffn", moe.shared_ffn));
    KP_RETURN_IF_ERROR(ValidateGroups(moe));
  } else {
    KP_RETURN_IF_ERROR(NonNegative("moe.num_experts", moe.num_experts));
  }
  if (storage.routed_expert_bits != 4 && storage.routed_expert_bits != 8 &&
      storage.routed_expert_bits != 16)
    return Status::InvalidArgument("storage.routed_expert_bits: must be 4, 8 or 16, got " +
                                   std::to_string(storage.routed_expert_bits));
  KP_RETURN_IF_ERROR(Positive("storage.quant_group_size", storage.quant_group_size));
  KP_RETURN_IF_ERROR(ValidateRope(rope));
  if (!(norm_eps > 0 && norm_eps < 1))
    return Status::InvalidArgument("norm_eps: must be in (0, 1), got " + std::to_string(norm_eps));
  return Status::Ok();
}

Result<std::vector<AttentionKind>> ExpandAttentionPattern(
    int layers, const std::vector<AttentionKind>& pattern,
    const std::vector<AttentionKind>& tail) {
  if (pattern.empty()) return Status::InvalidArgument("attention.pattern: must not be empty");
  const int body = layers - static_cast<int>(tail.size());
  if (body < 0 || body % static_cast<int>(pattern.size()) != 0)
    return Status::InvalidArgument(
        "attention.pattern: layers (" + std::to_string(layers) + ") minus the tail (" +
        std::to_string(tail.size()) + ") must be a multiple of the pattern length (" +
        std::to_string(pattern.size()) + ")");
  std::vector<AttentionKind> out;
  out.reserve(layers);
  for (int i = 0; i < body; ++i) out.push_back(pattern[i % pattern.size()]);
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

}  // namespace kp
