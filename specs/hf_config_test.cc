#include "specs/hf_config.h"

#include <gtest/gtest.h>

#include "common/file_system.h"
#include "specs/presets.h"

namespace kp {
namespace {

// The keys of moonshotai/Kimi-K2-Instruct-0905's config.json, with the
// released values, as transformers 4.x and vLLM read them.
const char* kKimiK2Config = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2",
  "vocab_size": 163840, "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
  "num_hidden_layers": 61, "num_attention_heads": 64, "num_key_value_heads": 64,
  "n_shared_experts": 1, "n_routed_experts": 384, "routed_scaling_factor": 2.827,
  "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128,
  "topk_method": "noaux_tc", "n_group": 1, "topk_group": 1, "num_experts_per_tok": 8,
  "moe_layer_freq": 1, "first_k_dense_replace": 1, "norm_topk_prob": true, "scoring_func": "sigmoid",
  "aux_loss_alpha": 0.001, "seq_aux": true, "hidden_act": "silu", "max_position_embeddings": 262144,
  "initializer_range": 0.02, "rms_norm_eps": 1e-06, "use_cache": true, "tie_word_embeddings": false,
  "rope_theta": 50000.0,
  "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 64.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                   "original_max_position_embeddings": 4096, "type": "yarn"},
  "attention_bias": false, "attention_dropout": 0.0, "num_nextn_predict_layers": 0,
  "quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group", "group_size": 32}}}}
})";

TEST(HfConfigTest, KimiK2ConfigIsTheKimiK26Preset) {
  ASSERT_TRUE(IsHfConfig(kKimiK2Config));
  Result<ModelSpec> m = ModelSpecFromHfConfig(kKimiK2Config, "kimi-k2.6");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->rope.theta, 50000);
  EXPECT_TRUE(m->rope.interleaved);
  EXPECT_EQ(m->rope.yarn.factor, 64);
  EXPECT_EQ(m->moe.route_scale, 2.827);
  EXPECT_EQ(m->storage.routed_expert_bits, 4);
  EXPECT_EQ(m->storage.quant_group_size, 32);
  // Field for field the preset (the preset's source notes aside).
  RealFileSystem fs;
  PresetCatalog catalog(fs, DefaultPresetDir());
  Result<ModelSpec> preset = catalog.Model("kimi-k2.6");
  ASSERT_TRUE(preset.ok()) << preset.status().message();
  EXPECT_EQ(ModelSpecToJson(*m), ModelSpecToJson(*preset));
}

TEST(HfConfigTest, TransformersFiveRopeParametersAndATextConfigWrapper) {
  const char* config = R"({"model_type": "kimi_k25", "text_config": {"model_type": "deepseek_v3",
    "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
    "num_hidden_layers": 3, "num_attention_heads": 4, "n_shared_experts": 1, "n_routed_experts": 16,
    "routed_scaling_factor": 2.5, "kv_lora_rank": 32, "q_lora_rank": null, "qk_rope_head_dim": 8,
    "v_head_dim": 16, "qk_nope_head_dim": 16, "n_group": 4, "topk_group": 2, "num_experts_per_tok": 4,
    "first_k_dense_replace": 1, "rms_norm_eps": 1e-5, "rope_interleave": false,
    "rope_parameters": {"rope_type": "yarn", "rope_theta": 20000.0, "factor": 8.0,
                        "original_max_position_embeddings": 512, "beta_fast": 32, "beta_slow": 1}}})";
  Result<ModelSpec> m = ModelSpecFromHfConfig(config, "small");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->mla.q_lora_rank, 0);
  EXPECT_EQ(m->moe.groups, 4);
  EXPECT_EQ(m->moe.topk_groups, 2);
  EXPECT_EQ(m->norm_eps, 1e-5);
  EXPECT_EQ(m->rope.theta, 20000);
  EXPECT_FALSE(m->rope.interleaved);
  EXPECT_EQ(m->rope.yarn.factor, 8);
  EXPECT_EQ(m->rope.yarn.original_max_positions, 512);
  EXPECT_EQ(m->rope.yarn.mscale_all_dim, 0);  // absent: HF's default
  EXPECT_EQ(m->dense_layers, 1);
  EXPECT_EQ(m->storage.routed_expert_bits, 16);
}

TEST(HfConfigTest, ArchitecturesTheRuntimeCannotRunAreRefusedByKey) {
  const std::string base = kKimiK2Config;
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = base;
    s.replace(s.find(from), from.size(), to);
    return ModelSpecFromHfConfig(s, "x").status().message();
  };
  EXPECT_NE(with("\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true").find("tie_word_embeddings"),
            std::string::npos);
  EXPECT_NE(with("\"scoring_func\": \"sigmoid\"", "\"scoring_func\": \"softmax\"").find("scoring_func"),
            std::string::npos);
  EXPECT_NE(with("\"type\": \"yarn\"", "\"type\": \"linear\"").find("rope_scaling.rope_type"), std::string::npos);
  EXPECT_NE(with("\"model_type\": \"kimi_k2\"", "\"model_type\": \"llama\"").find("model_type"), std::string::npos);
  EXPECT_NE(with("\"n_group\": 1", "\"n_group\": 5").find("moe.groups"), std::string::npos);
  EXPECT_NE(with("\"hidden_size\": 7168", "\"hidden_size\": \"big\"").find("hidden_size"), std::string::npos);
  EXPECT_FALSE(IsHfConfig(R"({"name": "kimi-k2.6"})"));
}

TEST(HfConfigTest, EveryDeepSeekV3PresetSurvivesTheConfigRoundTrip) {
  RealFileSystem fs;
  PresetCatalog catalog(fs, DefaultPresetDir());
  for (const char* name : {"kimi-k2.6", "deepseek-v3"}) {
    Result<ModelSpec> preset = catalog.Model(name);
    ASSERT_TRUE(preset.ok()) << preset.status().message();
    Result<std::string> config = HfConfigFromModelSpec(*preset, "bfloat16");
    ASSERT_TRUE(config.ok()) << config.status().message();
    ModelSpec want = *preset;
    want.storage = StorageFormat{};  // the config of a bf16 export has no quantization
    Result<ModelSpec> back = ModelSpecFromHfConfig(*config, name);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(ModelSpecToJson(*back), ModelSpecToJson(want)) << name;
  }
  Result<ModelSpec> k3 = catalog.Model("kimi-k3");
  ASSERT_TRUE(k3.ok());
  EXPECT_NE(HfConfigFromModelSpec(*k3, "bfloat16").status().message().find("attention"), std::string::npos);
}

}  // namespace
}  // namespace kp
