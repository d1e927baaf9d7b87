#include "specs/hf_config.h"

#include <nlohmann/json.hpp>

#include "common/limits.h"
#include "specs/json_fields.h"

namespace kp {
namespace {

using json = nlohmann::json;

bool IsDeepSeekV3Type(const std::string& type) { return type == "deepseek_v3" || type == "kimi_k2"; }

// The config object that holds the language model: the top level, or a
// multimodal wrapper's text_config.
Result<const json*> LanguageConfig(const json& top) {
  const json& type = top.at("model_type");
  if (type.is_string() && IsDeepSeekV3Type(type.get<std::string>())) return &top;
  if (top.contains("text_config") && top.at("text_config").is_object()) {
    const json& text = top.at("text_config");
    if (text.contains("model_type") && text.at("model_type").is_string() &&
        IsDeepSeekV3Type(text.at("model_type").get<std::string>()))
      return &text;
  }
  return Status::InvalidArgument("model_type: " + type.dump() +
                                 " is not supported (deepseek_v3 or kimi_k2, or a text_config of one)");
}

// An integer that HF writes as null when the feature is off.
Status IntOrNull(Fields& f, const char* key, int* out, std::int64_t max) {
  if (f.object().contains(key) && f.object().at(key).is_null()) {
    *out = 0;
    return Status::Ok();
  }
  return f.Int(key, out, 0, max);
}

// A value the runtime cannot run with is refused rather than ignored.
Status Require(const json& c, const char* key, const json& wanted, const std::string& why) {
  if (!c.contains(key) || c.at(key) == wanted) return Status::Ok();
  return Status::InvalidArgument(std::string(key) + ": " + c.at(key).dump() + " is not supported (" + why + ")");
}

Status ReadRope(const json& c, RopeSpec* rope) {
  Fields f(c, "");
  // transformers 5 folds rope_theta and rope_scaling into rope_parameters.
  const json* params = nullptr;
  KP_ASSIGN_OR_RETURN(params, f.Object("rope_parameters"));
  const json* scaling = nullptr;
  if (c.contains("rope_scaling") && !c.at("rope_scaling").is_null()) {
    KP_ASSIGN_OR_RETURN(scaling, f.Object("rope_scaling"));
  }
  const std::string prefix = params ? "rope_parameters" : "rope_scaling";
  const json* s = params ? params : scaling;
  rope->theta = 10000;
  if (params && params->contains("rope_theta")) {
    Fields p(*params, "rope_parameters");
    KP_RETURN_IF_ERROR(p.Number("rope_theta", &rope->theta, 1.000001, 1e8));
  } else {
    KP_RETURN_IF_ERROR(f.Number("rope_theta", &rope->theta, 1.000001, 1e8, /*required=*/false));
  }
  rope->interleaved = true;  // DeepseekV3Config's default, and every release's layout
  KP_RETURN_IF_ERROR(f.Bool("rope_interleave", &rope->interleaved));
  if (!s) return Status::Ok();
  std::string type = "default";
  Fields y(*s, prefix);
  if (s->contains("rope_type")) KP_RETURN_IF_ERROR(y.String("rope_type", &type));
  else if (s->contains("type")) KP_RETURN_IF_ERROR(y.String("type", &type));
  if (type == "default") return Status::Ok();
  if (type != "yarn") return Status::InvalidArgument(prefix + ".rope_type: \"" + type + "\" is not supported (default or yarn)");
  KP_RETURN_IF_ERROR(ReadYarnFields(y, "original_max_position_embeddings", &rope->yarn));
  if (s->contains("attention_factor"))
    return Status::InvalidArgument(prefix + ".attention_factor: is not supported (give mscale and mscale_all_dim)");
  bool truncate = true;
  KP_RETURN_IF_ERROR(y.Bool("truncate", &truncate));
  if (!truncate) return Status::InvalidArgument(prefix + ".truncate: false is not supported");
  return Status::Ok();
}

// compressed-tensors pack-quantized INT4 (Kimi K2 Thinking, K2.5, K2.6): the
// routed experts' bits and group size.
Status ReadQuantization(const json& top, const json& c, StorageFormat* storage) {
  const json* q = c.contains("quantization_config") ? &c.at("quantization_config")
                  : top.contains("quantization_config") ? &top.at("quantization_config") : nullptr;
  if (!q) return Status::Ok();
  if (!q->is_object() || q->value("quant_method", "") != "compressed-tensors" || !q->contains("config_groups"))
    return Status::InvalidArgument("quantization_config: only compressed-tensors pack-quantized INT4 is supported");
  for (const auto& [name, group] : q->at("config_groups").items()) {
    if (!group.is_object() || !group.contains("weights")) continue;
    Fields w(group.at("weights"), "quantization_config.config_groups." + name + ".weights");
    KP_RETURN_IF_ERROR(w.Int("num_bits", &storage->routed_expert_bits, 4, 4));
    KP_RETURN_IF_ERROR(w.Int("group_size", &storage->quant_group_size, 1, limits::kMaxHidden));
    return Status::Ok();
  }
  return Status::InvalidArgument("quantization_config.config_groups: no group with weights");
}

}  // namespace

Status ReadYarnFields(Fields& y, const char* original_key, YarnScaling* yarn) {
  KP_RETURN_IF_ERROR(y.Number("factor", &yarn->factor, 1, 1e6));
  KP_RETURN_IF_ERROR(y.Int(original_key, &yarn->original_max_positions, 1, 1 << 30));
  KP_RETURN_IF_ERROR(y.Number("beta_fast", &yarn->beta_fast, 1e-6, 1e6, false));
  KP_RETURN_IF_ERROR(y.Number("beta_slow", &yarn->beta_slow, 1e-6, 1e6, false));
  KP_RETURN_IF_ERROR(y.Number("mscale", &yarn->mscale, 0, 1e6, false));
  return y.Number("mscale_all_dim", &yarn->mscale_all_dim, 0, 1e6, false);
}

bool IsHfConfig(const std::string& json_text) {
  const json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("model_type");
}

Result<ModelSpec> ModelSpecFromHfConfig(const std::string& json_text, const std::string& name) {
  KP_ASSIGN_OR_RETURN(const json top, ParseObject(json_text));
  if (!top.contains("model_type")) return Status::InvalidArgument("model_type: required field is missing");
  KP_ASSIGN_OR_RETURN(const json* cp, LanguageConfig(top));
  const json& c = *cp;
  KP_RETURN_IF_ERROR(Require(c, "tie_word_embeddings", false, "the runtime's head is untied"));
  KP_RETURN_IF_ERROR(Require(c, "norm_topk_prob", true, "the runtime normalises the top-k weights"));
  KP_RETURN_IF_ERROR(Require(c, "scoring_func", "sigmoid", "the runtime's router is sigmoid-scored"));
  KP_RETURN_IF_ERROR(Require(c, "hidden_act", "silu", "the runtime's FFNs are SwiGLU"));
  KP_RETURN_IF_ERROR(Require(c, "attention_bias", false, "the runtime's projections have no bias"));
  ModelSpec m;
  m.name = name;
  Fields f(c, "");
  KP_RETURN_IF_ERROR(f.Int("num_hidden_layers", &m.layers, 1, limits::kMaxLayers));
  KP_RETURN_IF_ERROR(f.Int("hidden_size", &m.hidden, 1, limits::kMaxHidden));
  KP_RETURN_IF_ERROR(f.Int("num_attention_heads", &m.heads, 1, limits::kMaxHeads));
  m.kv_heads = m.heads;
  KP_RETURN_IF_ERROR(f.Int("vocab_size", &m.vocab, 1, limits::kMaxVocab));
  KP_RETURN_IF_ERROR(f.Int("first_k_dense_replace", &m.dense_layers, 0, limits::kMaxLayers));
  KP_RETURN_IF_ERROR(f.Int("intermediate_size", &m.dense_ffn, 1, limits::kMaxFfn));
  m.attention.assign(m.layers, AttentionKind::kMla);
  KP_RETURN_IF_ERROR(IntOrNull(f, "q_lora_rank", &m.mla.q_lora_rank, limits::kMaxHidden));
  KP_RETURN_IF_ERROR(f.Int("kv_lora_rank", &m.mla.kv_lora_rank, 1, limits::kMaxHidden));
  KP_RETURN_IF_ERROR(f.Int("qk_nope_head_dim", &m.mla.qk_nope_head_dim, 1, limits::kMaxHidden));
  KP_RETURN_IF_ERROR(f.Int("qk_rope_head_dim", &m.mla.qk_rope_head_dim, 0, limits::kMaxHidden));
  KP_RETURN_IF_ERROR(f.Int("v_head_dim", &m.mla.v_head_dim, 1, limits::kMaxHidden));
  KP_RETURN_IF_ERROR(IntOrNull(f, "n_routed_experts", &m.moe.num_experts, limits::kMaxExperts));
  if (m.moe.num_experts > 0) {
    KP_RETURN_IF_ERROR(f.Int("num_experts_per_tok", &m.moe.top_k, 1, limits::kMaxExperts));
    KP_RETURN_IF_ERROR(f.Int("moe_intermediate_size", &m.moe.expert_ffn, 1, limits::kMaxFfn));
    KP_RETURN_IF_ERROR(IntOrNull(f, "n_shared_experts", &m.moe.shared_experts, limits::kMaxExperts));
    m.moe.shared_ffn = m.moe.expert_ffn;  // HF: one MLP of moe_intermediate_size x n_shared_experts
    m.moe.route_scale = 1.0;
    KP_RETURN_IF_ERROR(f.Number("routed_scaling_factor", &m.moe.route_scale, 1e-6, 1e6, false));
    KP_RETURN_IF_ERROR(f.Int("n_group", &m.moe.groups, 1, limits::kMaxExperts, false));
    KP_RETURN_IF_ERROR(f.Int("topk_group", &m.moe.topk_groups, 1, limits::kMaxExperts, false));
  } else {
    m.dense_layers = m.layers;
  }
  KP_RETURN_IF_ERROR(f.Number("rms_norm_eps", &m.norm_eps, 1e-12, 0.5, false));
  KP_RETURN_IF_ERROR(ReadRope(c, &m.rope));
  KP_RETURN_IF_ERROR(ReadQuantization(top, c, &m.storage));
  KP_RETURN_IF_ERROR(m.Validate());
  return m;
}

Result<std::string> HfConfigFromModelSpec(const ModelSpec& m, const std::string& torch_dtype, bool int4_experts) {
  if (m.count(AttentionKind::kMla) != m.layers)
    return Status::InvalidArgument("attention: a DeepSeek-V3 config needs MLA in every layer");
  if (m.tied_embeddings) return Status::InvalidArgument("tied_embeddings: a DeepSeek-V3 config is untied");
  if (!m.gated_ffn) return Status::InvalidArgument("gated_ffn: a DeepSeek-V3 config has SwiGLU FFNs");
  if (m.attn_res_block > 0) return Status::InvalidArgument("attn_res_block: a DeepSeek-V3 config has none");
  if (m.mla.output_gate) return Status::InvalidArgument("mla.output_gate: a DeepSeek-V3 config has none");
  if (m.moe.latent_dim > 0) return Status::InvalidArgument("moe.latent_dim: a DeepSeek-V3 config has none");
  if (m.is_moe() && m.moe.shared_experts > 0 && m.moe.shared_ffn != m.moe.expert_ffn)
    return Status::InvalidArgument("moe.shared_ffn: a DeepSeek-V3 config's shared experts are expert_ffn wide");
  const int max_positions = m.rope.yarn.enabled()
                                ? static_cast<int>(m.rope.yarn.factor * m.rope.yarn.original_max_positions)
                                : 4096;
  json j = {{"architectures", {"DeepseekV3ForCausalLM"}},
            {"model_type", "deepseek_v3"},
            {"torch_dtype", torch_dtype},
            {"num_hidden_layers", m.layers},
            {"hidden_size", m.hidden},
            {"num_attention_heads", m.heads},
            {"num_key_value_heads", m.heads},
            {"vocab_size", m.vocab},
            {"first_k_dense_replace", m.is_moe() ? m.dense_layers : m.layers},
            {"intermediate_size", m.dense_ffn},
            {"q_lora_rank", m.mla.q_lora_rank > 0 ? json(m.mla.q_lora_rank) : json(nullptr)},
            {"kv_lora_rank", m.mla.kv_lora_rank},
            {"qk_nope_head_dim", m.mla.qk_nope_head_dim},
            {"qk_rope_head_dim", m.mla.qk_rope_head_dim},
            {"v_head_dim", m.mla.v_head_dim},
            {"n_routed_experts", m.is_moe() ? json(m.moe.num_experts) : json(nullptr)},
            {"num_experts_per_tok", m.moe.top_k},
            {"moe_intermediate_size", m.moe.expert_ffn},
            {"n_shared_experts", m.moe.shared_experts},
            {"routed_scaling_factor", m.moe.route_scale},
            {"n_group", m.moe.groups},
            {"topk_group", m.moe.topk_groups},
            {"topk_method", "noaux_tc"},
            {"scoring_func", "sigmoid"},
            {"norm_topk_prob", true},
            {"hidden_act", "silu"},
            {"attention_bias", false},
            {"tie_word_embeddings", false},
            {"rms_norm_eps", m.norm_eps},
            {"rope_theta", m.rope.theta},
            {"rope_interleave", m.rope.interleaved},
            {"max_position_embeddings", max_positions},
            {"num_nextn_predict_layers", 0}};
  if (m.rope.yarn.enabled()) {
    const YarnScaling& y = m.rope.yarn;
    j["rope_scaling"] = {{"type", "yarn"}, {"rope_type", "yarn"}, {"factor", y.factor},
                         {"original_max_position_embeddings", y.original_max_positions},
                         {"beta_fast", y.beta_fast}, {"beta_slow", y.beta_slow},
                         {"mscale", y.mscale}, {"mscale_all_dim", y.mscale_all_dim}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  if (int4_experts) {
    // The group of kimi-k2.6's weights/int4.h; ReadQuantization reads it back.
    const json weights = {{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"strategy", "group"},
                          {"group_size", 32}, {"dynamic", false}};
    j["quantization_config"] = {
        {"quant_method", "compressed-tensors"},
        {"format", "pack-quantized"},
        {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", nullptr}}}}},
        {"ignore",
         {"lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"}}};
  }
  return j.dump(2) + "\n";
}

}  // namespace kp
