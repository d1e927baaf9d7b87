#include "specs/model_spec.h"

#include <gtest/gtest.h>

namespace kp {
namespace {

using K = AttentionKind;

TEST(AttentionPatternTest, KimiK3PatternGives69KdaAnd24Mla) {
  auto kinds = ExpandAttentionPattern(93, {K::kKda, K::kKda, K::kKda, K::kMla}, {K::kMla});
  ASSERT_TRUE(kinds.ok());
  ModelSpec m;
  m.attention = *kinds;
  EXPECT_EQ(m.count(K::kKda), 69);
  EXPECT_EQ(m.count(K::kMla), 24);
  EXPECT_EQ(kinds->at(3), K::kMla);
  EXPECT_EQ(kinds->at(91), K::kMla);
  EXPECT_EQ(kinds->at(92), K::kMla);
  EXPECT_EQ(kinds->at(90), K::kKda);
}

TEST(AttentionPatternTest, RejectsALengthThePatternDoesNotTile) {
  auto kinds = ExpandAttentionPattern(10, {K::kKda, K::kKda, K::kKda, K::kMla}, {K::kMla});
  ASSERT_FALSE(kinds.ok());
  EXPECT_NE(kinds.status().message().find("attention.pattern"), std::string::npos);
}

ModelSpec Tiny() {
  ModelSpec m;
  m.name = "tiny";
  m.layers = 2;
  m.hidden = 64;
  m.heads = 4;
  m.head_dim = 16;
  m.kv_heads = 4;
  m.vocab = 100;
  m.dense_ffn = 256;
  m.attention = {K::kMha, K::kMha};
  return m;
}

TEST(ModelSpecTest, ValidateNamesTheField) {
  ModelSpec m = Tiny();
  EXPECT_TRUE(m.Validate().ok());
  m.hidden = 0;
  EXPECT_EQ(m.Validate().message(), "hidden: must be a positive integer, got 0");
  m = Tiny();
  m.kv_heads = 3;
  EXPECT_EQ(m.Validate().message().rfind("kv_heads:", 0), 0u);
  m = Tiny();
  m.moe.num_experts = 8;
  m.moe.top_k = 9;
  m.moe.expert_ffn = 32;
  EXPECT_EQ(m.Validate().message().rfind("moe.top_k:", 0), 0u);
}

TEST(ModelSpecTest, AttnResBlocksCountThePartialBlock) {
  ModelSpec m = Tiny();
  m.layers = 93;
  m.attn_res_block = 12;
  EXPECT_EQ(m.attn_res_blocks(), 8);  // 7 x 12 + 9
  m.layers = 17;
  m.attn_res_block = 4;
  EXPECT_EQ(m.attn_res_blocks(), 5);
}

}  // namespace
}  // namespace kp
