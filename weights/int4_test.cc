#include "weights/int4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace kp {
namespace {

TEST(Int4Test, PacksEightOffsetNibblesPerWordLowestFirst) {
  std::vector<std::int8_t> q;
  for (int v = -8; v <= 7; ++v) q.push_back(static_cast<std::int8_t>(v));
  // -8..-1 become 0..7, 0..7 become 8..15, element j in bits 4j..4j+3.
  const std::vector<std::int32_t> packed = PackInt4(q, 1, 16);
  ASSERT_EQ(packed.size(), 2u);
  EXPECT_EQ(static_cast<std::uint32_t>(packed[0]), 0x76543210u);
  EXPECT_EQ(static_cast<std::uint32_t>(packed[1]), 0xFEDCBA98u);
  EXPECT_EQ(UnpackInt4(packed, 1, 16), q);
}

TEST(Int4Test, Bf16RoundsToNearestEven) {
  EXPECT_EQ(ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(ToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // halfway: to the even 1.0
  EXPECT_EQ(ToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // halfway: to the even 1 + 2^-6
  EXPECT_EQ(ToBf16(-2.0f), 0xc000);
  EXPECT_EQ(FromBf16(0x4010), 2.25f);
}

TEST(Int4Test, AGroupQuantizedByHand) {
  std::vector<float> w(32);
  for (int i = 0; i < 32; ++i) w[i] = static_cast<float>(i - 16);  // -16 .. 15
  Result<PackedInt4> p = QuantizeInt4(w, 1, 32, "w");
  ASSERT_TRUE(p.ok()) << p.status().message();
  // 16 / 7.5 = 2.1333 = 2 x 1.0667; bf16 keeps 7 bits: 2 x (1 + 9/128).
  ASSERT_EQ(p->scales.size(), 1u);
  EXPECT_EQ(FromBf16(p->scales[0]), 2.140625f);
  const std::vector<std::int8_t> q = UnpackInt4(p->packed, 1, 32);
  EXPECT_EQ(q[0], -7);   // -16 / 2.14 = -7.47
  EXPECT_EQ(q[16], 0);
  EXPECT_EQ(q[31], 7);   // 15 / 2.14 = 7.01
  EXPECT_EQ(q[18], 1);   // 2 / 2.14 = 0.93
}

TEST(Int4Test, RoundTripWithinTheStatedBoundOfEachGroupsScale) {
  std::mt19937 rng(5);  // the engine is specified; the uniform map below is ours
  const int rows = 8, cols = 128;
  std::vector<float> w(rows * cols);
  for (float& x : w) x = (static_cast<float>(rng()) / 4294967296.0f - 0.5f) * (1 + rng() % 7);
  w[3] = 40.0f;  // an outlier in one group
  Result<PackedInt4> p = QuantizeInt4(w, rows, cols, "w");
  ASSERT_TRUE(p.ok());
  Result<std::vector<float>> back = DequantizeInt4(*p, "w");
  ASSERT_TRUE(back.ok());
  for (std::size_t i = 0; i < w.size(); ++i) {
    const float s = FromBf16(p->scales[i / 32]);
    EXPECT_LE(std::fabs(w[i] - (*back)[i]), s * (0.5f + 7.5f / 256.0f)) << i;
  }
}

TEST(Int4Test, RefusesShapesThatDoNotFitNamingTheWeight) {
  EXPECT_EQ(QuantizeInt4(std::vector<float>(48), 1, 48, "experts.0.up").status().message(),
            "experts.0.up: INT4 groups of 32 need a [rows, cols] weight with cols a multiple of 32, got [1, 48]");
  PackedInt4 p;
  p.rows = 2, p.cols = 32, p.packed.resize(4), p.scales.resize(1);
  EXPECT_EQ(DequantizeInt4(p, "experts.0.up").status().message(),
            "experts.0.up: weight_packed 4 words and 1 scales do not fit weight_shape [2, 32]");
}

}  // namespace
}  // namespace kp
