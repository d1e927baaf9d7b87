#include "planner/schedule_model.h"

#include <gtest/gtest.h>

namespace kp {
namespace {

TEST(ScheduleModelTest, OneFOneBHoldsPMinusRMicroBatches) {
  for (int r = 0; r < 4; ++r) EXPECT_EQ(PeakInflightChunks(ScheduleKind::k1F1B, 4, 1, 16, r), 4 - r);
  EXPECT_EQ(PeakInflightChunks(ScheduleKind::k1F1B, 8, 1, 3, 0), 3);  // fewer micro-batches than stages
  EXPECT_EQ(PeakInflightChunks(ScheduleKind::kGpipe, 4, 1, 16, 0), 16);
}

// Korthikanti et al. eq. 5: interleaving raises rank 0's activation memory
// to L (1 + (p - 1) / (p v)) layers.
TEST(ScheduleModelTest, InterleavedRankZeroMatchesKorthikanti) {
  for (int p : {2, 4, 8}) {
    for (int v : {2, 3, 4}) {
      const int L = p * v * 3;
      const double layers = PeakInflightChunks(ScheduleKind::kInterleaved1F1B, p, v, 64, 0) * double(L) / (p * v);
      EXPECT_DOUBLE_EQ(layers, L * (1 + double(p - 1) / (p * v))) << p << " " << v;
    }
  }
}

TEST(ScheduleModelTest, BubbleClosedForms) {
  const Seconds f(1), b(2), w(0.5);
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::k1F1B, 4, 1, f, b, w).value(), 3 * 3.5);
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::kGpipe, 4, 1, f, b, w).value(), 3 * 3.5);
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::kInterleaved1F1B, 4, 2, f, b, w).value(), 3 * 3.5 / 2);
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::kZbH1, 4, 1, f, b, w).value(), 3 * 2.5);
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::kZbH2, 4, 1, f, b, w).value(), 3 * 2.0);
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::k1F1B, 1, 1, f, b, w).value(), 0);
}

// The ZB paper's zero bubble for zb-h2 and zbv at F = B = W counts idle time
// inside each rank's span; a synchronised step still waits for the last
// rank's fill: (p - 1) F for zb-h2, (p - 1) F / 2 for the V-shaped schedules
// (whose chunks take half a rank's time).
TEST(ScheduleModelTest, ZeroBubbleSchedulesStillPayTheFill) {
  const Seconds x(2);
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::kZbH2, 4, 1, x, x, x).value(), 3 * 2.0);
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::kZbv, 4, 1, x, x, x).value(), 3 * 1.0);
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::kDualPipeV, 4, 1, x, x, x).value(), 3 * 1.0);
  // Where W is small enough to leave a bubble, the paper's zb-h2 form holds.
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::kZbH2, 4, 1, Seconds(1), Seconds(4), Seconds(1)).value(), 3 * 3.0);
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::kZbH2, 4, 1, Seconds(1), Seconds(0.5), Seconds(1)).value(), 3 * 1.0);
}

// Checked against the simulated schedules (simulator/pipeline_sim_test.cc):
// zbv (p-1) max(B - W, B/2) for F <= B; dualpipev (p-1)(B - W/2) for F = B,
// which is DeepSeek's (PP/2 - 1)(F&B + B - 3W) per chunk with the forward
// wholly hidden in the overlapped pair (F&B = the full backward chunk).
TEST(ScheduleModelTest, VShapedBubbles) {
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::kZbv, 4, 1, Seconds(2), Seconds(4), Seconds(1)).value(), 3 * 3.0);
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::kZbv, 4, 1, Seconds(2), Seconds(4), Seconds(3)).value(), 3 * 2.0);
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::kDualPipeV, 4, 1, Seconds(4), Seconds(4), Seconds(2)).value(), 3 * 3.0);
  const double chunk_b = (4 + 2) / 2.0, chunk_w = 2 / 2.0;
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::kDualPipeV, 4, 1, Seconds(4), Seconds(4), Seconds(2)).value(),
                   (8 / 2 - 1) * (chunk_b + chunk_b - 3 * chunk_w));
}

// With post-validation (the ZB paper's optimizer step) a step costs the
// longest rank's span: the paper's (p - 1)(F + B - 2W) for zb-h2 and zero
// for zbv at F = B = W; the last rank's fill is no longer paid. Schedules
// whose rank 0 spans the whole step cost the same either way.
TEST(ScheduleModelTest, PostValidationDropsTheFill) {
  const OptimizerSync pv = OptimizerSync::kPostValidation;
  const Seconds x(2);
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::kZbH2, 4, 1, x, x, x, pv).value(), 0);
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::kZbv, 4, 1, x, x, x, pv).value(), 0);
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::kDualPipeV, 4, 1, x, x, x, pv).value(), 3 * 1.0);
  // The case, in microseconds: (p - 1)(F + B - 2W) = 7 x 19308.
  const Seconds f(29718e-6), b(29444e-6), w(19927e-6);
  EXPECT_NEAR(BubbleTime(ScheduleKind::kZbH2, 8, 1, f, b, w, pv).value(), 7 * 19308e-6, 1e-12);
  EXPECT_NEAR(BubbleTime(ScheduleKind::kZbH2, 8, 1, f, b, w).value(), 7 * 29718e-6, 1e-12);
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::kZbv, 4, 1, Seconds(2), Seconds(4), Seconds(1), pv).value(), 3 * 3.0);
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::kZbv, 4, 1, Seconds(2), Seconds(4), Seconds(3), pv).value(), 3 * 1.0);
  for (ScheduleKind k : {ScheduleKind::kGpipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B,
                         ScheduleKind::kZbH1, ScheduleKind::kDualPipeV})
    EXPECT_DOUBLE_EQ(BubbleTime(k, 4, 2, Seconds(1), Seconds(2), Seconds(0.5), pv).value(),
                     BubbleTime(k, 4, 2, Seconds(1), Seconds(2), Seconds(0.5)).value())
        << ScheduleName(k);
}

TEST(ScheduleKindTest, OptimizerSyncNamesAndDefaults) {
  for (OptimizerSync s : {OptimizerSync::kSynchronised, OptimizerSync::kPostValidation}) {
    auto parsed = ParseOptimizerSync(OptimizerSyncName(s));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_EQ(ParseOptimizerSync("async").status().message(),
            "--optimizer-sync: must be sync or post-validation, got \"async\"");
  for (const std::string& n : ScheduleNames()) {
    const ScheduleKind k = *ParseSchedule(n);
    const bool zb = k == ScheduleKind::kZbH1 || k == ScheduleKind::kZbH2 || k == ScheduleKind::kZbv;
    EXPECT_EQ(DefaultOptimizerSync(k), zb ? OptimizerSync::kPostValidation : OptimizerSync::kSynchronised) << n;
  }
}

TEST(ScheduleModelTest, DualPipeVHoldsPPPlusOneChunks) {
  // DualPipe's table: activation PP + 1 chunks, PP = 2p stages for DualPipeV.
  EXPECT_EQ(PeakInflightChunks(ScheduleKind::kDualPipeV, 4, 1, 16, 0), 9);
  EXPECT_EQ(PeakInflightChunks(ScheduleKind::kDualPipeV, 4, 1, 4, 3), 8);  // 2M caps it
}

TEST(ScheduleModelTest, StagesPerRank) {
  EXPECT_EQ(StagesPerRank(ScheduleKind::k1F1B, 1), 1);
  EXPECT_EQ(StagesPerRank(ScheduleKind::kInterleaved1F1B, 4), 4);
  EXPECT_EQ(StagesPerRank(ScheduleKind::kZbv, 1), 2);
  EXPECT_EQ(StagesPerRank(ScheduleKind::kDualPipeV, 1), 2);
}

TEST(ScheduleKindTest, ParsesEveryNameAndRejectsOthers) {
  for (const std::string& n : ScheduleNames()) {
    auto k = ParseSchedule(n);
    ASSERT_TRUE(k.ok());
    EXPECT_EQ(ScheduleName(*k), n);
  }
  auto bad = ParseSchedule("2f2b");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("--schedule: unknown schedule \"2f2b\" (allowed: gpipe, 1f1b", 0), 0u);
}

}  // namespace
}  // namespace kp
