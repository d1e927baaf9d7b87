#include "runtime/model/runtime_config.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

namespace kp::runtime {

using nlohmann::json;

const char* DTypeName(DType d) { return d == DType::kBf16 ? "bf16" : "fp32"; }

Result<DType> ParseDType(const std::string& s, const std::string& field) {
  if (s == "fp32") return DType::kFp32;
  if (s == "bf16") return DType::kBf16;
  return Status::InvalidArgument(field + ": must be fp32 or bf16, got \"" + s + "\"");
}

namespace {

// A width that follows the hidden size; 0 stays 0 (the feature is off).
int ScaleWidth(int width, double ratio) {
  if (width <= 0) return width;
  return std::max(1, static_cast<int>(std::lround(width * ratio)));
}

Status PositiveFlag(const char* flag, const std::optional<int>& v, int min = 1) {
  if (!v || *v >= min) return Status::Ok();
  return Status::InvalidArgument(std::string("--") + flag + ": must be >= " + std::to_string(min) + ", got " +
                                 std::to_string(*v));
}

void ScaleHidden(ModelSpec& m, int hidden) {
  const double r = static_cast<double>(hidden) / m.hidden;
  m.hidden = hidden;
  m.dense_ffn = ScaleWidth(m.dense_ffn, r);
  m.moe.expert_ffn = ScaleWidth(m.moe.expert_ffn, r);
  m.moe.shared_ffn = ScaleWidth(m.moe.shared_ffn, r);
  m.moe.latent_dim = ScaleWidth(m.moe.latent_dim, r);
  m.mla.q_lora_rank = ScaleWidth(m.mla.q_lora_rank, r);
  m.mla.kv_lora_rank = ScaleWidth(m.mla.kv_lora_rank, r);
}

Status ScaleLayers(ModelSpec& m, int layers) {
  if (layers > m.layers)
    return Status::InvalidArgument("--layers: at most the preset's " + std::to_string(m.layers) + ", got " +
                                   std::to_string(layers));
  std::vector<AttentionKind> kinds(m.attention.begin(), m.attention.begin() + (layers - 1));
  kinds.push_back(m.attention.back());
  m.attention = std::move(kinds);
  m.layers = layers;
  m.dense_layers = std::min(m.dense_layers, layers);
  return Status::Ok();
}

}  // namespace

namespace {

// With fewer experts the preset's expert groups may no longer divide them
// (DeepSeek-V3's 8 groups of 32 scaled to 4 experts): the most groups of at
// least two experts that divide the new count, keeping the share of groups
// that may be chosen where the top_k still fits.
void KeepGroupsValid(MoeShape* moe) {
  if (moe->num_experts == 0 || moe->groups <= 1) return;
  int groups = moe->groups;
  while (groups > 1 && (moe->num_experts % groups != 0 || moe->num_experts / groups < 2)) --groups;
  int topk_groups = std::max(1, moe->topk_groups * groups / moe->groups);
  while (topk_groups < groups && moe->top_k > topk_groups * (moe->num_experts / groups)) ++topk_groups;
  moe->groups = groups;
  moe->topk_groups = groups == 1 ? 1 : topk_groups;
}

}  // namespace

Result<ModelSpec> ScaleModel(const ModelSpec& preset, const ScaleFlags& f) {
  KP_RETURN_IF_ERROR(PositiveFlag("layers", f.layers));
  KP_RETURN_IF_ERROR(PositiveFlag("hidden", f.hidden));
  KP_RETURN_IF_ERROR(PositiveFlag("heads", f.heads));
  KP_RETURN_IF_ERROR(PositiveFlag("experts", f.experts, 0));
  KP_RETURN_IF_ERROR(PositiveFlag("top-k", f.top_k));
  KP_RETURN_IF_ERROR(PositiveFlag("vocab", f.vocab, 2));
  KP_RETURN_IF_ERROR(PositiveFlag("attn-res-block", f.attn_res_block, 0));
  KP_RETURN_IF_ERROR(PositiveFlag("dense-layers", f.dense_layers, 0));
  ModelSpec m = preset;
  const bool mha = m.count(AttentionKind::kMha) > 0;
  if (f.layers) KP_RETURN_IF_ERROR(ScaleLayers(m, *f.layers));
  if (f.hidden) ScaleHidden(m, *f.hidden);
  if (f.heads) {
    if (m.kv_heads == m.heads) m.kv_heads = *f.heads;
    m.heads = *f.heads;
  }
  if (mha && (f.hidden || f.heads)) {
    if (m.hidden % m.heads != 0)
      return Status::InvalidArgument("--heads: " + std::to_string(m.heads) + " does not divide the hidden size " +
                                     std::to_string(m.hidden));
    m.head_dim = m.hidden / m.heads;
  }
  if (f.experts) {
    m.moe.num_experts = *f.experts;
    if (*f.experts == 0) m.moe = MoeShape{};
    else m.moe.top_k = std::min(m.moe.top_k, *f.experts);
  }
  if (f.top_k) m.moe.top_k = *f.top_k;
  if (f.experts || f.top_k) KeepGroupsValid(&m.moe);
  if (f.vocab) m.vocab = *f.vocab;
  if (f.attn_res_block) m.attn_res_block = *f.attn_res_block;
  if (f.dense_layers) m.dense_layers = *f.dense_layers;
  if (!m.is_moe() && m.dense_ffn <= 0)
    return Status::InvalidArgument("--experts: 0 makes every layer dense, but the preset has no dense_ffn width");
  KP_RETURN_IF_ERROR(ValidateForRuntime(m));
  return m;
}

Result<bool> Int4ExpertBase(const ModelSpec& m, bool native_base) {
  if (!native_base || !m.is_moe() || m.storage.routed_expert_bits == 16) return false;
  if (m.storage.routed_expert_bits != 4)
    return Status::InvalidArgument("--lora-native-base: the model stores its routed experts in " +
                                   std::to_string(m.storage.routed_expert_bits) +
                                   " bits; the runtime holds INT4 (or bf16) bases");
  if (m.storage.quant_group_size != 32)
    return Status::InvalidArgument("--lora-native-base: the runtime's INT4 has groups of 32, the model's storage "
                                   "groups of " + std::to_string(m.storage.quant_group_size));
  return true;
}

Status ValidateForRuntime(const ModelSpec& m) {
  KP_RETURN_IF_ERROR(m.Validate());
  if (m.tied_embeddings)
    return Status::InvalidArgument("tied_embeddings: the runtime builds an untied LM head; set it to false");
  if (m.count(AttentionKind::kMha) > 0 && m.head_dim % 2 != 0)
    return Status::InvalidArgument("head_dim: must be even for rotary embeddings, got " + std::to_string(m.head_dim));
  if (m.count(AttentionKind::kMla) > 0 && m.mla.qk_rope_head_dim % 2 != 0)
    return Status::InvalidArgument("mla.qk_rope_head_dim: must be even for rotary embeddings, got " +
                                   std::to_string(m.mla.qk_rope_head_dim));
  return Status::Ok();
}

std::string ModelShapeJson(const ModelSpec& m, const LoraOptions& lora) {
  json kinds = json::array();
  for (AttentionKind k : m.attention) kinds.push_back(AttentionKindName(k));
  json j = {
      {"layers", m.layers}, {"hidden", m.hidden}, {"heads", m.heads}, {"head_dim", m.head_dim},
      {"kv_heads", m.kv_heads}, {"vocab", m.vocab}, {"dense_layers", m.dense_layers}, {"dense_ffn", m.dense_ffn},
      {"gated_ffn", m.gated_ffn}, {"attention", kinds}, {"attn_res_block", m.attn_res_block},
      {"mla", {{"q_lora_rank", m.mla.q_lora_rank}, {"kv_lora_rank", m.mla.kv_lora_rank},
               {"qk_nope_head_dim", m.mla.qk_nope_head_dim}, {"qk_rope_head_dim", m.mla.qk_rope_head_dim},
               {"v_head_dim", m.mla.v_head_dim}}},
      {"kda", {{"head_dim_k", m.kda.head_dim_k}, {"head_dim_v", m.kda.head_dim_v},
               {"conv_kernel", m.kda.conv_kernel}}},
      {"moe", {{"num_experts", m.moe.num_experts}, {"top_k", m.moe.top_k}, {"expert_ffn", m.moe.expert_ffn},
               {"shared_experts", m.moe.shared_experts}, {"shared_ffn", m.moe.shared_ffn},
               {"latent_dim", m.moe.latent_dim}, {"route_scale", m.moe.route_scale}, {"groups", m.moe.groups},
               {"topk_groups", m.moe.topk_groups}}},
      // Not shapes, but a checkpoint means nothing under another RoPE or eps.
      {"rope", {{"theta", m.rope.theta}, {"interleaved", m.rope.interleaved}, {"yarn_factor", m.rope.yarn.factor},
                {"yarn_original_max_positions", m.rope.yarn.original_max_positions},
                {"yarn_beta_fast", m.rope.yarn.beta_fast}, {"yarn_beta_slow", m.rope.yarn.beta_slow},
                {"yarn_mscale", m.rope.yarn.mscale}, {"yarn_mscale_all_dim", m.rope.yarn.mscale_all_dim}}},
      {"norm_eps", m.norm_eps},
      {"lora", {{"rank", lora.rank}, {"alpha", lora.alpha},
                {"experts", lora.experts == LoraExperts::kPerExpert ? "per-expert" : "shared-outer"}}},
  };
  return j.dump();
}

std::string FirstShapeDifference(const std::string& a_json, const std::string& b_json) {
  const json a = json::parse(a_json, nullptr, false).flatten();
  const json b = json::parse(b_json, nullptr, false).flatten();
  // The fields a user sets first, then the rest in key order.
  std::vector<std::string> keys = {"/layers", "/hidden", "/heads", "/vocab", "/moe/num_experts", "/lora/rank"};
  std::set<std::string> rest;
  for (auto it = a.begin(); it != a.end(); ++it) rest.insert(it.key());
  for (auto it = b.begin(); it != b.end(); ++it) rest.insert(it.key());
  keys.insert(keys.end(), rest.begin(), rest.end());
  for (const std::string& k : keys) {
    const std::string av = a.contains(k) ? a[k].dump() : "absent";
    const std::string bv = b.contains(k) ? b[k].dump() : "absent";
    if (av != bv) {
      std::string field = k.substr(1);
      for (char& c : field)
        if (c == '/') c = '.';
      return field + ": " + av + " vs " + bv;
    }
  }
  return "";
}

}  // namespace kp::runtime
