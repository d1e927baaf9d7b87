#include "specs/param_count.h"

#include <gtest/gtest.h>

#include "common/file_system.h"
#include "specs/presets.h"

namespace kp {
namespace {

ModelSpec Load(const std::string& name) {
  RealFileSystem fs;
  auto m = PresetCatalog(fs, DefaultPresetDir()).Model(name);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return *m;
}

void ExpectWithin(double value, double published, double rel) {
  EXPECT_LE(std::abs(value - published) / published, rel) << value << " vs " << published;
}

TEST(ParamCountTest, KimiK26MatchesPublishedTotals) {
  ParamCount c = CountParams(Load("kimi-k2.6"));
  ExpectWithin(c.total, 1.03e12, 0.01);
  ExpectWithin(c.active, 32.9e9, 0.01);
}

TEST(ParamCountTest, DeepSeekV3MatchesPublishedTotal) {
  ParamCount c = CountParams(Load("deepseek-v3"));
  ExpectWithin(c.total, 671e9, 0.01);
}

// DeepSeek's "37B activated" is rounded. Recount it independently from the
// published config: per-layer MLA, 3 dense layers, 58 MoE layers with 8
// routed and 1 shared expert, embedding and head, router and norms.
TEST(ParamCountTest, DeepSeekV3ActiveEqualsAnIndependentRecount) {
  const double h = 7168, H = 128, V = 129280;
  const double mla = h * 1536 + 1536 + 1536 * H * 192 + h * 576 + 512 + 512 * H * 256 + H * 128 * h;
  const double expert = 3 * h * 2048;
  const double dense = 3 * h * 18432;
  const double active = 61 * (mla + 2 * h) + 3 * dense + 58 * (9 * expert + h * 256 + 256) + 2 * V * h + h;
  ParamCount c = CountParams(Load("deepseek-v3"));
  EXPECT_DOUBLE_EQ(c.active, active);
  EXPECT_GT(c.active, 36.5e9);  // consistent with the published rounding
  EXPECT_LT(c.active, 38e9);
}

TEST(ParamCountTest, KimiK3MatchesPublishedTotals) {
  ModelSpec m = Load("kimi-k3");
  EXPECT_EQ(m.count(AttentionKind::kKda), 69);
  EXPECT_EQ(m.count(AttentionKind::kMla), 24);
  ParamCount c = CountParams(m);
  ExpectWithin(c.total, 2.8e12, 0.01);
  ExpectWithin(c.active, 104e9, 0.01);
}

TEST(ParamCountTest, KimiK26LayerIsTheHandWorkedSum) {
  ModelSpec m = Load("kimi-k2.6");
  ParamCount c = CountParams(m);
  // MLA: q_a 7168x1536 + norm, q_b 1536x64x192, kv_a 7168x576 + norm 512,
  // kv_b 512x64x256, o 64x128x7168.
  const double mla = 7168.0 * 1536 + 1536 + 1536.0 * 64 * 192 + 7168.0 * 576 + 512 + 512.0 * 64 * 256 + 64.0 * 128 * 7168;
  EXPECT_DOUBLE_EQ(c.layers[1].attention, mla);
  EXPECT_DOUBLE_EQ(c.layers[1].routed_expert, 3.0 * 7168 * 2048);
  EXPECT_DOUBLE_EQ(c.layers[1].routed_experts, 384 * 3.0 * 7168 * 2048);
  EXPECT_DOUBLE_EQ(c.layers[0].dense_ffn, 3.0 * 7168 * 18432);
  EXPECT_EQ(c.layers[0].routed_experts, 0);
}

TEST(ParamCountTest, GptByFlagsIsTwelveHSquaredPerLayer) {
  ModelSpec m;
  m.name = "gpt";
  m.layers = 4;
  m.hidden = 1024;
  m.heads = 16;
  m.head_dim = 64;
  m.kv_heads = 16;
  m.vocab = 50000;
  m.dense_ffn = 4096;
  m.gated_ffn = false;
  m.attention.assign(4, AttentionKind::kMha);
  ParamCount c = CountParams(m);
  EXPECT_DOUBLE_EQ(c.sum.attention + c.sum.dense_ffn, 4 * 12.0 * 1024 * 1024);
}

}  // namespace
}  // namespace kp
