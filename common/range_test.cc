#include "common/range.h"

#include <gtest/gtest.h>

namespace kp {
namespace {

TEST(RangeTest, IntegersInRange) {
  EXPECT_EQ(*ParseIntInRange("--nodes", "131072", 1, 131072), 131072);
  EXPECT_EQ(*ParseIntInRange("--x", "-3", -5, 5), -3);
  EXPECT_TRUE(CheckIntRange("n", 0, 0, 1).ok());
}

TEST(RangeTest, IntegersOutOfRangeNameTheFlagAndTheBound) {
  EXPECT_EQ(ParseIntInRange("--nodes", "536870914", 1, 131072).status().message(),
            "--nodes: must be at most 131072, got 536870914");
  EXPECT_EQ(ParseIntInRange("--tp", "0", 1, 8).status().message(), "--tp: must be a positive integer, got 0 (at most 8)");
  EXPECT_EQ(ParseIntInRange("--r", "-1", 0, 8).status().message(), "--r: must be >= 0, got -1 (at most 8)");
  EXPECT_EQ(ParseIntInRange("--steps", "1", 2, 8).status().message(), "--steps: must be at least 2, got 1 (at most 8)");
  // Beyond 64 bits is beyond the range, not wrapped.
  EXPECT_EQ(ParseIntInRange("--n", "99999999999999999999999", 1, 8).status().message(),
            "--n: must be at most 8, got 99999999999999999999999");
  EXPECT_FALSE(ParseIntInRange("--n", "-99999999999999999999999", 1, 8).ok());
}

TEST(RangeTest, NotIntegers) {
  for (const char* t : {"", "1.5", "1e3", "12abc", " 4", "0x10", "inf", "nan"})
    EXPECT_EQ(ParseIntInRange("--n", t, 1, 8).status().message(),
              std::string("--n: must be an integer from 1 to 8, got \"") + t + "\"")
        << t;
}

TEST(RangeTest, NumbersMustBeFiniteAndInRange) {
  EXPECT_EQ(*ParseNumberInRange("--f", "2.5", 0, 10), 2.5);
  EXPECT_EQ(ParseNumberInRange("--bucket-gib", "inf", 0, 10).status().message(),
            "--bucket-gib: must be a finite number, got inf");
  EXPECT_EQ(ParseNumberInRange("--f", "nan", 0, 10).status().message(), "--f: must be a finite number, got nan");
  EXPECT_EQ(ParseNumberInRange("--f", "1e400", 0, 10).status().message(), "--f: must be a finite number, got 1e400");
  EXPECT_EQ(ParseNumberInRange("--f", "1e300", 0, 10).status().message(), "--f: must be >= 0 and <= 10, got 1e+300");
  EXPECT_EQ(ParseNumberInRange("--f", "-1", 0, 10).status().message(), "--f: must be >= 0 and <= 10, got -1");
  EXPECT_EQ(ParseNumberInRange("--e", "0", 0, 1, true).status().message(), "--e: must be > 0 and <= 1, got 0");
  EXPECT_EQ(ParseNumberInRange("--f", "abc", 0, 1).status().message(),
            "--f: must be a number >= 0 and <= 1, got \"abc\"");
  EXPECT_FALSE(CheckNumberRange("x", -std::numeric_limits<double>::infinity(), -1e308, 0).ok());
}

// A denormal passes "> 0" and divides into infinity (issue 28).
TEST(RangeTest, DenormalsAreRefused) {
  EXPECT_EQ(ParseNumberInRange("--comm-efficiency", "1e-320", 0, 1, /*min_open=*/true).status().message(),
            "--comm-efficiency: must be 0 or a normal number (magnitude at least 2.2e-308), got 1e-320");
  EXPECT_TRUE(ParseNumberInRange("--comm-efficiency", "1e-300", 0, 1, true).ok());
  EXPECT_TRUE(ParseNumberInRange("--dp-overlap", "0", 0, 1).ok());
  EXPECT_FALSE(CheckNumberRange("bf16_tflops", 4.9e-324, 0, 1e6).ok());
}

}  // namespace
}  // namespace kp
