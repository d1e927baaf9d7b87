#include "specs/rope.h"

#include <cmath>

#include <gtest/gtest.h>

namespace kp {
namespace {

RopeSpec Yarn(double theta, double factor, double beta_fast, double beta_slow, double mscale, double mscale_all_dim) {
  RopeSpec r;
  r.theta = theta;
  r.yarn.factor = factor;
  r.yarn.original_max_positions = 4096;
  r.yarn.beta_fast = beta_fast;
  r.yarn.beta_slow = beta_slow;
  r.yarn.mscale = mscale;
  r.yarn.mscale_all_dim = mscale_all_dim;
  return r;
}

TEST(RopeTest, PlainRopeIsThetaToTheMinusTwoIOverDim) {
  RopeSpec r;
  r.theta = 10000;
  const std::vector<double> f = RopeInverseFrequencies(r, 8);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_DOUBLE_EQ(f[0], 1.0);
  EXPECT_DOUBLE_EQ(f[1], 0.1);   // 10000^(-2/8)
  EXPECT_DOUBLE_EQ(f[2], 0.01);
  EXPECT_NEAR(f[3], 0.001, 1e-18);
  EXPECT_EQ(RopeCosSinScale(r), 1.0);
  EXPECT_EQ(RopeSoftmaxScale(r), 1.0);
}

// Kimi K2's YaRN (theta 50000, factor 64, beta 1 / 1, 4096 positions) on
// 64 rotary channels. The correction dim of one rotation is
// 64 ln(4096 / 2pi) / (2 ln 50000) = 19.165, so the range is [19, 20]: a step
// between pair 19 (kept) and pair 20 (divided by 64).
TEST(RopeTest, KimiK2YarnIsAStepAtPairTwenty) {
  const RopeSpec r = Yarn(50000, 64, 1, 1, 1, 1);
  const std::vector<double> f = RopeInverseFrequencies(r, 64);
  ASSERT_EQ(f.size(), 32u);
  EXPECT_DOUBLE_EQ(f[0], 1.0);
  EXPECT_DOUBLE_EQ(f[19], std::pow(50000.0, -38.0 / 64));
  EXPECT_DOUBLE_EQ(f[20], std::pow(50000.0, -40.0 / 64) / 64);
  EXPECT_DOUBLE_EQ(f[31], std::pow(50000.0, -62.0 / 64) / 64);
  // mscale == mscale_all_dim: cos and sin unscaled; the softmax scale gains
  // (0.1 ln 64 + 1)^2.
  EXPECT_DOUBLE_EQ(RopeCosSinScale(r), 1.0);
  EXPECT_NEAR(RopeSoftmaxScale(r), 2.0047397, 1e-7);
}

// DeepSeek-V3's (theta 10000, factor 40, beta 32 / 1): the range is
// [floor(10.47), ceil(22.51)] = [10, 23], a linear ramp over 13 pairs.
TEST(RopeTest, DeepSeekV3YarnRampsLinearlyBetweenTheCorrectionDims) {
  const RopeSpec r = Yarn(10000, 40, 32, 1, 1, 1);
  const std::vector<double> f = RopeInverseFrequencies(r, 64);
  auto plain = [](int i) { return std::pow(10000.0, -2.0 * i / 64); };
  EXPECT_DOUBLE_EQ(f[10], plain(10));
  EXPECT_DOUBLE_EQ(f[15], plain(15) / 40 * (5.0 / 13) + plain(15) * (8.0 / 13));
  EXPECT_DOUBLE_EQ(f[23], plain(23) / 40);
  EXPECT_NEAR(RopeSoftmaxScale(r), std::pow(0.1 * std::log(40.0) + 1, 2), 1e-15);
}

TEST(RopeTest, MscaleWithoutMscaleAllDimScalesCosAndSinOnly) {
  const RopeSpec r = Yarn(10000, 16, 32, 1, 0.707, 0);
  EXPECT_DOUBLE_EQ(RopeCosSinScale(r), 0.1 * std::log(16.0) + 1);
  EXPECT_EQ(RopeSoftmaxScale(r), 1.0);
  const RopeSpec s = Yarn(10000, 16, 32, 1, 2, 1);
  EXPECT_DOUBLE_EQ(RopeCosSinScale(s), (0.2 * std::log(16.0) + 1) / (0.1 * std::log(16.0) + 1));
}

}  // namespace
}  // namespace kp
