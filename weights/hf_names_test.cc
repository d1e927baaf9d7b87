#include "weights/hf_names.h"

#include <gtest/gtest.h>

namespace kp {
namespace {

// Kimi K2.6's names for a dense layer 0 and an MoE layer 1, against the
// runtime's (runtime/model: DecoderLayerImpl, MlaImpl, MoeImpl, HeadImpl).
const std::pair<const char*, const char*> kPairs[] = {
    {"model.embed_tokens.weight", "embedding.weight"},
    {"model.layers.0.input_layernorm.weight", "layers.0.attn_norm.weight"},
    {"model.layers.0.self_attn.q_a_proj.weight", "layers.0.attention.q_a.weight"},
    {"model.layers.0.self_attn.q_a_layernorm.weight", "layers.0.attention.q_norm.weight"},
    {"model.layers.0.self_attn.q_b_proj.weight", "layers.0.attention.q_b.weight"},
    {"model.layers.0.self_attn.kv_a_proj_with_mqa.weight", "layers.0.attention.kv_a.weight"},
    {"model.layers.0.self_attn.kv_a_layernorm.weight", "layers.0.attention.kv_norm.weight"},
    {"model.layers.0.self_attn.kv_b_proj.weight", "layers.0.attention.kv_b.weight"},
    {"model.layers.0.self_attn.o_proj.weight", "layers.0.attention.o_proj.weight"},
    {"model.layers.0.post_attention_layernorm.weight", "layers.0.ffn_norm.weight"},
    {"model.layers.0.mlp.gate_proj.weight", "layers.0.ffn.gate.weight"},
    {"model.layers.0.mlp.down_proj.weight", "layers.0.ffn.down.weight"},
    {"model.layers.61.mlp.gate.weight", "layers.61.moe.router.weight"},
    {"model.layers.61.mlp.gate.e_score_correction_bias", "layers.61.moe.router.bias"},
    {"model.layers.61.mlp.shared_experts.up_proj.weight", "layers.61.moe.shared.up.weight"},
    {"model.norm.weight", "head.norm.weight"},
    {"lm_head.weight", "head.lm_head.weight"},
};

TEST(HfNamesTest, EachReleasedNameMapsToItsRuntimeTensorAndBack) {
  for (const auto& [hf, runtime] : kPairs) {
    Result<RuntimeTarget> t = RuntimeTargetOf(hf);
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_EQ(t->name, runtime) << hf;
    EXPECT_EQ(t->expert, -1) << hf;
    EXPECT_EQ(t->form, HfForm::kWhole) << hf;
    Result<std::vector<std::string>> back = HfNamesOf(runtime, 8, false);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(*back, std::vector<std::string>{hf});
  }
}

TEST(HfNamesTest, ARoutedExpertIsASliceOfTheBankInBf16OrInt4) {
  Result<RuntimeTarget> t = RuntimeTargetOf("model.layers.3.mlp.experts.17.down_proj.weight");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->name, "layers.3.moe.experts.down");
  EXPECT_EQ(t->expert, 17);
  EXPECT_EQ(t->form, HfForm::kWhole);
  t = RuntimeTargetOf("model.layers.3.mlp.experts.17.gate_proj.weight_scale");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->name, "layers.3.moe.experts.gate");
  EXPECT_EQ(t->expert, 17);
  EXPECT_EQ(t->form, HfForm::kInt4Scale);
  EXPECT_EQ(RuntimeTargetOf("model.layers.3.mlp.experts.0.up_proj.weight_packed")->form, HfForm::kInt4Packed);
  EXPECT_EQ(RuntimeTargetOf("model.layers.3.mlp.experts.0.up_proj.weight_shape")->form, HfForm::kInt4Shape);
  EXPECT_EQ(*HfNamesOf("layers.1.moe.experts.up", 2, false),
            (std::vector<std::string>{"model.layers.1.mlp.experts.0.up_proj.weight",
                                      "model.layers.1.mlp.experts.1.up_proj.weight"}));
  EXPECT_EQ(*HfNamesOf("layers.1.moe.experts.up", 1, true),
            (std::vector<std::string>{"model.layers.1.mlp.experts.0.up_proj.weight_packed",
                                      "model.layers.1.mlp.experts.0.up_proj.weight_scale",
                                      "model.layers.1.mlp.experts.0.up_proj.weight_shape"}));
}

TEST(HfNamesTest, RefusesNamesTheTableLacks) {
  EXPECT_EQ(RuntimeTargetOf("model.layers.0.mlp.experts.x.up_proj.weight").status().message(),
            "model.layers.0.mlp.experts.x.up_proj.weight: not a tensor of a Kimi K2 / DeepSeek-V3 checkpoint");
  EXPECT_FALSE(RuntimeTargetOf("model.layers.01.input_layernorm.weight").ok());   // not a layer number
  EXPECT_FALSE(RuntimeTargetOf("model.layers.0.self_attn.o_proj.weight_packed").ok());  // only experts ship INT4
  EXPECT_FALSE(RuntimeTargetOf("model.layers.0.input_layernorm.weight.extra").ok());
  EXPECT_EQ(HfNamesOf("layers.0.attention.q_conv", 1, false).status().message(),
            "layers.0.attention.q_conv: no Hugging Face name for this runtime tensor");
}

}  // namespace
}  // namespace kp
