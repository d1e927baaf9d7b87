#include "common/status.h"

#include <gtest/gtest.h>

#include "common/units.h"

namespace kp {
namespace {

TEST(StatusTest, ExitCodesFollowTheKind) {
  EXPECT_EQ(Status::Ok().ExitCode(), 0);
  EXPECT_EQ(Status::InvalidArgument("x").ExitCode(), 2);
  EXPECT_EQ(Status::NotFound("x").ExitCode(), 2);
  EXPECT_EQ(Status::IoError("x").ExitCode(), 1);
  EXPECT_EQ(Status::Internal("x").ExitCode(), 1);
}

TEST(StatusTest, ContextPrefixesTheMessage) {
  Status s = Status::InvalidArgument("layers: must be positive").WithContext("presets/models/x.json");
  EXPECT_EQ(s.message(), "presets/models/x.json: layers: must be positive");
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Status::Ok().WithContext("ignored").ok());
}

Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("x: must be even");
  return x / 2;
}

Status UseHalf(int x, int* out) {
  KP_ASSIGN_OR_RETURN(*out, Half(x));
  return Status::Ok();
}

TEST(StatusTest, AssignOrReturnPropagates) {
  int v = 0;
  EXPECT_TRUE(UseHalf(8, &v).ok());
  EXPECT_EQ(v, 4);
  Status s = UseHalf(3, &v);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "x: must be even");
}

TEST(UnitsTest, RatesTimesTimes) {
  // 595.2 GB over a 50 Gb/s front end: the seed's TCP figure.
  EXPECT_NEAR(TransferTime(GB(595.2), Gbps(50)).value(), 95.232, 1e-9);
  EXPECT_EQ(ToNanoseconds(Seconds(1.5)).value(), 1500000000);
  EXPECT_DOUBLE_EQ((GB(3) + GB(1)) / GB(2), 2.0);
}

}  // namespace
}  // namespace kp
