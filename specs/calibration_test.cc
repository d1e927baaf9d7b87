#include "specs/calibration.h"

#include <cmath>

#include <gtest/gtest.h>

namespace kp {
namespace {

// A grid whose achieved rate is a known function of the shape, so every
// lookup has a closed-form answer: rate = 1e12 * m^0.5 (FLOP/s), any n, k.
std::vector<GemmPoint> RatePoints(const std::vector<std::int64_t>& ms, const std::vector<std::int64_t>& ns,
                                  const std::vector<std::int64_t>& ks) {
  std::vector<GemmPoint> pts;
  for (auto m : ms)
    for (auto n : ns)
      for (auto k : ks) {
        const double rate = 1e12 * std::sqrt(double(m));
        pts.push_back({m, n, k, Seconds(2.0 * m * n * k / rate)});
      }
  return pts;
}

TEST(GemmGridTest, GridPointsAreExact) {
  auto g = GemmGrid::Build(RatePoints({256, 1024}, {128, 512}, {64, 4096}), "gemm.bf16");
  ASSERT_TRUE(g.ok()) << g.status().message();
  const double exact = 2.0 * 1024 * 512 * 4096 / (1e12 * 32);
  EXPECT_NEAR(g->Time(1024, 512, 4096).value(), exact, exact * 1e-12);
}

TEST(GemmGridTest, InterpolatesTheRateInLogSpace) {
  auto g = GemmGrid::Build(RatePoints({256, 1024}, {128, 512}, {64, 4096}), "gemm.bf16");
  ASSERT_TRUE(g.ok());
  // m = 512 is halfway in log2 between 256 and 1024: the geometric mean of
  // the rates 16e12 and 32e12, which is the closed form's sqrt(512) * 1e12.
  const double rate = 1e12 * std::sqrt(512.0);
  EXPECT_NEAR(g->Time(512, 256, 512).value(), 2.0 * 512 * 256 * 512 / rate, 1e-15);
  EXPECT_NEAR(g->Efficiency(512, 256, 512, TFLOPS(100)), std::sqrt(512.0) / 100, 1e-12);
}

TEST(GemmGridTest, AboveTheGridKeepsTheEdgeRateBelowItTheEdgeTime) {
  auto g = GemmGrid::Build(RatePoints({256, 1024}, {128, 512}, {64, 4096}), "gemm.bf16");
  ASSERT_TRUE(g.ok());
  EXPECT_NEAR(g->Time(8192, 512, 4096).value(), 2.0 * 8192 * 512 * 4096 / (1e12 * 32), 1e-15);
  EXPECT_NEAR(g->Time(16, 128, 64).value(), g->Time(256, 128, 64).value(), 1e-18);
}

TEST(GemmGridTest, RefusesAnIncompleteGridNamingTheShape) {
  auto pts = RatePoints({256, 1024}, {128, 512}, {64, 4096});
  pts.erase(pts.begin() + 3);  // m=256 n=512 k=4096
  auto g = GemmGrid::Build(pts, "gemm.bf16");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(),
            "gemm.bf16: shape m=256 n=512 k=4096 is missing (the table must hold every combination of its m, n "
            "and k values)");
}

TEST(GemmGridTest, RefusesNonPositiveAndNonFiniteTimes) {
  for (double t : {-3e-6, 0.0, std::nan(""), double(INFINITY)}) {
    auto pts = RatePoints({256}, {128}, {64});
    pts[0].time = Seconds(t);
    auto g = GemmGrid::Build(pts, "gemm.bf16");
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().message().rfind("gemm.bf16[0]: time must be finite and > 0 microseconds", 0), 0u) << t;
  }
}

TEST(CollectiveTest, BusFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(BusFactor(CollectiveOp::kAllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(BusFactor(CollectiveOp::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusFactor(CollectiveOp::kReduceScatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(BusFactor(CollectiveOp::kAllToAll, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(BusFactor(CollectiveOp::kBroadcast, 8), 1.0);
}

TEST(CollectiveTest, TimeFromBusBandwidthInterpolatedInSize) {
  CalibrationTable t;
  // all-reduce over 8 NVLink ranks: 1 MB in 20 us and 1 GB in 4 ms.
  t.collectives.push_back({CollectiveOp::kAllReduce, LinkSpan::kNvlink, 8, "test",
                           {{Bytes(1e6), Seconds(20e-6)}, {Bytes(1e9), Seconds(4e-3)}}});
  const double f8 = 2.0 * 7 / 8, f4 = 2.0 * 3 / 4;
  const double bus_small = f8 * 1e6 / 20e-6, bus_large = f8 * 1e9 / 4e-3;
  // At a measured size and group, the measured time.
  EXPECT_NEAR(t.CollectiveTime(CollectiveOp::kAllReduce, LinkSpan::kNvlink, 8, Bytes(1e9))->value(), 4e-3, 1e-12);
  // Four ranks carry the bus bandwidth over with their own factor.
  EXPECT_NEAR(t.CollectiveTime(CollectiveOp::kAllReduce, LinkSpan::kNvlink, 4, Bytes(2e9))->value(),
              f4 * 2e9 / bus_large, 1e-12);
  // Halfway in log size (31.6 MB): the geometric mean of the bus bandwidths.
  const double mid = std::sqrt(1e6 * 1e9);
  EXPECT_NEAR(t.CollectiveTime(CollectiveOp::kAllReduce, LinkSpan::kNvlink, 8, Bytes(mid))->value(),
              f8 * mid / std::sqrt(bus_small * bus_large), 1e-12);
  // Below the smallest size, its time.
  EXPECT_NEAR(t.CollectiveTime(CollectiveOp::kAllReduce, LinkSpan::kNvlink, 8, Bytes(10))->value(), 20e-6, 1e-15);
  EXPECT_FALSE(t.CollectiveTime(CollectiveOp::kAllToAll, LinkSpan::kNvlink, 8, Bytes(1e6)).has_value());
  EXPECT_FALSE(t.CollectiveTime(CollectiveOp::kAllReduce, LinkSpan::kFabric, 8, Bytes(1e6)).has_value());
}

const char* kTable = R"({
  "schema": "kimi-plan.calibration/1", "gpu": "test", "source": "hand-made",
  "memory_copy_gbytes_per_s": 4300,
  "elementwise": {"share": 0.5, "source": "a fit"},
  "gemm": {"bf16": [[256, 128, 64, 1.5], [256, 128, 128, 2.5], [512, 128, 64, 2.0], [512, 128, 128, 3.0]]},
  "collectives": [{"op": "all-gather", "span": "fabric", "ranks": 16, "source": "s",
                   "points": [[1024, 30], [1048576, 60]]}]
})";

TEST(CalibrationFileTest, ParsesAndRoundTrips) {
  auto t = ParseCalibration(kTable);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->gpu, "test");
  EXPECT_DOUBLE_EQ(t->memory_copy.value(), 4300e9);
  EXPECT_DOUBLE_EQ(t->elementwise_share, 0.5);
  ASSERT_NE(t->Gemm(GemmDtype::kBf16), nullptr);
  EXPECT_EQ(t->Gemm(GemmDtype::kFp8), nullptr);
  EXPECT_NEAR(t->Gemm(GemmDtype::kBf16)->Time(512, 128, 128).value(), 3e-6, 1e-18);
  auto back = ParseCalibration(CalibrationToJson(*t));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(CalibrationToJson(*back), CalibrationToJson(*t));
  EXPECT_NEAR(back->CollectiveTime(CollectiveOp::kAllGather, LinkSpan::kFabric, 16, Bytes(1048576))->value(), 60e-6,
              1e-15);
}

TEST(CalibrationFileTest, BadFilesNameTheField) {
  auto bad = [](std::string from, std::string to) {
    std::string s = kTable;
    s.replace(s.find(from), from.size(), to);
    return ParseCalibration(s).status().message();
  };
  EXPECT_EQ(bad("[512, 128, 128, 3.0]", "[512, 128, 128, -3.0]"), "gemm.bf16[3]: time must be finite and > 0 microseconds, got -3");
  EXPECT_EQ(bad(", [512, 128, 128, 3.0]", "").rfind("gemm.bf16: shape m=512 n=128 k=128 is missing", 0), 0u);
  EXPECT_EQ(bad("[1024, 30]", "[1024, -30]"), "collectives[0].points[0]: time must be finite and > 0 microseconds, got -30");
  EXPECT_EQ(bad("\"fabric\"", "\"pcie\""), "collectives[0].span: must be nvlink or fabric, got \"pcie\"");
  EXPECT_EQ(bad("\"all-gather\"", "\"gather\"").rfind("collectives[0].op: must be all-reduce", 0), 0u);
  EXPECT_EQ(bad("calibration/1", "calibration/9"),
            "schema: must be \"kimi-plan.calibration/1\", got \"kimi-plan.calibration/9\"");
  EXPECT_EQ(bad("\"bf16\"", "\"fp4\""), "gemm.fp4: unknown dtype (bf16, fp8 or bf16-grouped)");
  EXPECT_EQ(bad("\"share\": 0.5", "\"share\": 1.5"), "elementwise.share: must be in (0, 1]");
  EXPECT_EQ(bad("\"share\": 0.5", "\"share\": -0.5"), "elementwise.share: must be in (0, 1]");
  EXPECT_EQ(bad("\"source\": \"hand-made\",", "\"source\": \"hand-made\", \"extra\": 1,"), "extra: unknown field");
  EXPECT_EQ(bad("[[1024, 30], [1048576, 60]]", "[[1048576, 60], [1024, 30]]"),
            "collectives[0].points[1]: sizes must increase");
}

}  // namespace
}  // namespace kp
