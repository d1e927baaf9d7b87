#include "specs/activation_profile.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace kp {
namespace {

ActivationProfile Example() {
  ActivationProfile p;
  p.model = "kimi-k3-debug";
  p.device = "cpu";
  p.dtype = "fp32";
  p.seq_len = 16;
  p.tokens = 16;
  p.embedding = 1024;
  p.layers = {110890.25, 121822, 0.1 + 0.2};
  p.layers_fixed = {0, 667e6, 12.5};
  p.head = 30836;
  p.head_fixed = 536e6;
  p.backward = 335228;
  p.source = "a test";
  return p;
}

TEST(ActivationProfileTest, JsonReadsBackExactly) {
  const ActivationProfile p = Example();
  Result<ActivationProfile> back = ParseActivationProfile(ActivationProfileToJson(p));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->model, p.model);
  EXPECT_EQ(back->device, p.device);
  EXPECT_EQ(back->dtype, p.dtype);
  EXPECT_EQ(back->seq_len, p.seq_len);
  EXPECT_EQ(back->tokens, p.tokens);
  EXPECT_EQ(back->layers_fixed, p.layers_fixed);
  EXPECT_EQ(back->head_fixed, p.head_fixed);
  EXPECT_EQ(back->embedding, p.embedding);
  EXPECT_EQ(back->layers, p.layers);  // 0.1 + 0.2 survives to the last bit
  EXPECT_EQ(back->head, p.head);
  EXPECT_EQ(back->backward, p.backward);
  EXPECT_EQ(back->source, p.source);
}

// Each bad field is refused with its name.
TEST(ActivationProfileTest, BadFieldsAreNamed) {
  const std::string good = ActivationProfileToJson(Example());
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  const std::pair<std::string, std::string> cases[] = {
      {with("kimi-plan.activation-profile/3", "kimi-plan.activation-profile/4"), "schema: "},
      {with("\"fp32\"", "\"fp8\""), "dtype: "},
      {with("\"tokens\": 16", "\"tokens\": 0"), "tokens: "},
      {with("\"head\": 30836.0", "\"head\": -1"), "head: "},
      {with("121822.0", "\"many\""), "layers[1]: "},
      {with("\"tokens\": 16", "\"tokens\": 16, \"extra\": 1"), "extra: unknown field"},
      {with("\"tokens\": 16", "\"tokens\": 24"), "tokens: 24 is not a whole number of 16-token sequences"},
      {with("12.5", "12.5, 1.0"), "layers_fixed: 4 figures, but layers has 3"},
      {"[1, 2]", "the top level must be a JSON object"},
  };
  for (const auto& [text, field] : cases) {
    Result<ActivationProfile> r = ParseActivationProfile(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().message();
  }
}

ActivationProfile Timed() {
  ActivationProfile p = Example();
  p.device = "cuda";
  p.time = PieceTimes{{1e-4, 1e-9}, {{2e-4, 3e-8}, {2e-4, 3e-8}, {1e-4, 1.5e-8}}, {5e-4, 2e-8}, {1e-3, 1.5e-7}};
  return p;
}

TEST(ActivationProfileTest, TimesReadBackExactlyAndVersionOneHasNone) {
  const ActivationProfile p = Timed();
  Result<ActivationProfile> back = ParseActivationProfile(ActivationProfileToJson(p));
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_TRUE(back->time.has_value());
  EXPECT_EQ(*back->time, *p.time);
  // A version-1 file (before times) still reads, without them; one that
  // claims version 1 and carries times is refused.
  std::string v1 = ActivationProfileToJson(Example());
  v1.replace(v1.find("/3"), 2, "/1");
  Result<ActivationProfile> old = ParseActivationProfile(v1);
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_FALSE(old->time.has_value());
  std::string v1_timed = ActivationProfileToJson(p);
  v1_timed.replace(v1_timed.find("/3"), 2, "/1");
  EXPECT_EQ(ParseActivationProfile(v1_timed).status().message(), "time: unknown field");
}

// Version 3's figures with the channel mixers recomputed read back exactly;
// a version-2 file has none, and one that carries them is refused.
TEST(ActivationProfileTest, RecomputedMixerFiguresReadBackAndVersionTwoHasNone) {
  ActivationProfile p = Example();
  p.layers_ffn_recomputed = {90000.5, 100000, 0.1 + 0.7};
  p.backward_ffn_recomputed = 401234.25;
  p.lora_rank = 8;
  Result<ActivationProfile> back = ParseActivationProfile(ActivationProfileToJson(p));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->lora_rank, 8);
  EXPECT_EQ(back->layers_ffn_recomputed, p.layers_ffn_recomputed);
  EXPECT_EQ(back->backward_ffn_recomputed, p.backward_ffn_recomputed);
  std::string v2 = ActivationProfileToJson(Example());
  v2.replace(v2.find("/3"), 2, "/2");
  Result<ActivationProfile> old = ParseActivationProfile(v2);
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_TRUE(old->layers_ffn_recomputed.empty());
  std::string v2_with = ActivationProfileToJson(p);
  v2_with.replace(v2_with.find("/3"), 2, "/2");
  EXPECT_EQ(ParseActivationProfile(v2_with).status().message(), "ffn_recomputed: unknown field");
  nlohmann::json j = nlohmann::json::parse(ActivationProfileToJson(p));
  j["ffn_recomputed"]["layers"] = {1.0, 2.0};
  EXPECT_EQ(ParseActivationProfile(j.dump()).status().message(),
            "ffn_recomputed.layers: 2 figures, but layers has 3");
  j["ffn_recomputed"]["layers"] = {1.0, -2.0, 3.0};
  EXPECT_EQ(ParseActivationProfile(j.dump()).status().message(),
            "ffn_recomputed.layers[1]: must be a number of bytes from 0 to 4e12");
}

TEST(ActivationProfileTest, BadTimesAreNamed) {
  nlohmann::json j = nlohmann::json::parse(ActivationProfileToJson(Timed()));
  auto refused = [&](const char* pointer, const nlohmann::json& v) {
    nlohmann::json one = j;
    one[nlohmann::json::json_pointer(pointer)] = v;
    return ParseActivationProfile(one.dump()).status().message();
  };
  EXPECT_EQ(refused("/time/head", nlohmann::json::array({-1, 0})),
            "time.head: must be [seconds a micro-batch from 0 to 3600, seconds a token from 0 to 1]");
  EXPECT_EQ(refused("/time/layers/1", 0.5),
            "time.layers[1]: must be [seconds a micro-batch from 0 to 3600, seconds a token from 0 to 1]");
  EXPECT_EQ(refused("/time/layers", nlohmann::json::array()), "time.layers: must list 3 layers, as layers does");
  EXPECT_EQ(refused("/time/gpu", 1), "time.gpu: unknown field");
}

// The backward's shares follow the forwards and add up to the backward.
TEST(ActivationProfileTest, BackwardSharesAddUpToTheBackward) {
  const PieceTimes t = *Timed().time;
  const double tokens = 4096;
  const double forward = t.embedding.At(tokens) + t.head.At(tokens) + t.layers[0].At(tokens) +
                         t.layers[1].At(tokens) + t.layers[2].At(tokens);
  double sum = t.BackwardShare(-1, tokens);
  for (int l = 0; l < 3; ++l) sum += t.BackwardShare(l, tokens);
  EXPECT_NEAR(sum, t.backward.At(tokens), 1e-15);
  EXPECT_NEAR(t.BackwardShare(2, tokens), t.backward.At(tokens) * (1e-4 + 1.5e-8 * tokens) / forward, 1e-15);
}

}  // namespace
}  // namespace kp
