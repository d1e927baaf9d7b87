#include "common/thread_share.h"

#include <gtest/gtest.h>

namespace kp {
namespace {

TEST(ThreadsPerLocalRankTest, EachRankGetsItsShareOfTheCores) {
  EXPECT_EQ(ThreadsPerLocalRank(1, 16, nullptr), 16);
  EXPECT_EQ(ThreadsPerLocalRank(4, 16, nullptr), 4);
  EXPECT_EQ(ThreadsPerLocalRank(3, 16, nullptr), 5);  // 16 / 3, rounded down
  EXPECT_EQ(ThreadsPerLocalRank(4, 2, nullptr), 1);   // more ranks than cores: one each
  EXPECT_EQ(ThreadsPerLocalRank(0, 0, nullptr), 1);
}

TEST(ThreadsPerLocalRankTest, ARequestCapsTheShareAndNeverRaisesIt) {
  EXPECT_EQ(ThreadsPerLocalRank(1, 16, "2"), 2);
  EXPECT_EQ(ThreadsPerLocalRank(4, 2, "2"), 1);  // the oversubscription the share prevents
  EXPECT_EQ(ThreadsPerLocalRank(2, 16, "64"), 8);
}

TEST(ThreadsPerLocalRankTest, AMalformedRequestAsksForNothing) {
  for (const char* bad : {"", "0", "-3", "2x", " 2", "two", "99999999999999999999"})
    EXPECT_EQ(ThreadsPerLocalRank(2, 8, bad), 4) << "'" << bad << "'";
}

TEST(ThreadsPerLocalRankTest, TheVariableNamesOpenMpsThreadCount) {
  EXPECT_EQ(ThreadsPerLocalRankVariable(4, 8, nullptr), "OMP_NUM_THREADS=2");
}

}  // namespace
}  // namespace kp
