#include "common/process_launcher.h"

#include <gtest/gtest.h>

namespace kp {
namespace {

TEST(LaunchProcess, RealReturnsTheChildsExitCode) {
  RealProcessLauncher p;
  auto ok = p.Run({"true"});
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(*ok, 0);
  auto three = p.Run({"sh", "-c", "exit 3"});
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(*three, 3);
}

TEST(LaunchProcess, RealPassesArgumentsUnsplit) {
  RealProcessLauncher p;
  // One argument with a space and a quote reaches the child as one word.
  auto r = p.Run({"sh", "-c", "test \"$1\" = \"a b'c\"", "sh", "a b'c"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 0);
}

TEST(LaunchProcess, RealReportsASignalAs128PlusItsNumber) {
  RealProcessLauncher p;
  auto r = p.Run({"sh", "-c", "kill -TERM $$"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 128 + 15);
}

TEST(LaunchProcess, RealNamesAProgramThatCannotStart) {
  RealProcessLauncher p;
  auto r = p.Run({"kimi-plan-no-such-program"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kIoError);
  EXPECT_EQ(r.status().message().rfind("kimi-plan-no-such-program: cannot start", 0), 0u) << r.status().message();
  EXPECT_FALSE(p.Run({}).ok());
}

TEST(LaunchProcess, FakeRecordsCallsAndAnswersAsTold) {
  FakeProcessLauncher p(7);
  auto r = p.Run({"sbatch", "job.sbatch"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 7);
  p.SetStartFailure(Status::IoError("modal: cannot start"));
  EXPECT_EQ(p.Run({"modal", "run"}).status().message(), "modal: cannot start");
  ASSERT_EQ(p.calls().size(), 2u);
  EXPECT_EQ(p.calls()[0], (std::vector<std::string>{"sbatch", "job.sbatch"}));
}

}  // namespace
}  // namespace kp
