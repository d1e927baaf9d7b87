#include "specs/activation_profile.h"

#include <gtest/gtest.h>

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
      {with("kimi-plan.activation-profile/1", "kimi-plan.activation-profile/2"), "schema: "},
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

}  // namespace
}  // namespace kp
