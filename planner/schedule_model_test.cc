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
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::kZbH2, 4, 1, f, Seconds(0.5), Seconds(1)).value(), 0);
  EXPECT_DOUBLE_EQ(BubbleTime(ScheduleKind::k1F1B, 1, 1, f, b, w).value(), 0);
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
