#include "common/process_launcher.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>

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

TEST(LaunchProcess, RealStartsConcurrentChildrenWithTheirEnvironment) {
  RealProcessLauncher p;
  auto a = p.Start({"sh", "-c", "test \"$KP_TEST_VALUE\" = a && exit 3"}, {"KP_TEST_VALUE=a"});
  auto b = p.Start({"sleep", "30"}, {});
  ASSERT_TRUE(a.ok() && b.ok());
  auto first = p.WaitAny();
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(*first, std::make_pair(*a, 3));
  ASSERT_TRUE(p.Kill(*b, 15).ok());
  auto second = p.WaitAny();
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, std::make_pair(*b, 128 + 15));
  EXPECT_EQ(p.WaitAny().status().code(), Status::Code::kIoError);  // none left
}

TEST(LaunchProcess, FakeStartsAndWaitsInOrder) {
  FakeProcessLauncher p(0);
  p.SetChildExit(2, 137);
  ASSERT_EQ(*p.Start({"kimi-plan", "run"}, {"RANK=0"}), 1);
  ASSERT_EQ(*p.Start({"kimi-plan", "run"}, {"RANK=1"}), 2);
  EXPECT_EQ(*p.WaitAny(), std::make_pair(1, 0));
  EXPECT_EQ(*p.WaitAny(), std::make_pair(2, 137));
  EXPECT_FALSE(p.WaitAny().ok());
  ASSERT_TRUE(p.Kill(1, 15).ok());
  EXPECT_EQ(p.envs()[1], (std::vector<std::string>{"RANK=1"}));
  EXPECT_EQ(p.kills(), (std::vector<std::pair<int, int>>{{1, 15}}));
}

// The local launcher's ranks share a process group that one signal stops;
// a stop flag (a signal handler's) ends the wait at once.
TEST(LaunchProcess, RealChildrenShareAGroupThatOneSignalStops) {
  RealProcessLauncher p;
  auto a = p.Start({"sleep", "30"}, {}, /*process_group=*/0);
  ASSERT_TRUE(a.ok());
  auto b = p.Start({"sleep", "30"}, {}, /*process_group=*/*a);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(::getpgid(*a), *a);
  EXPECT_EQ(::getpgid(*b), *a);
  volatile std::sig_atomic_t stop = SIGTERM;
  EXPECT_EQ(*p.WaitAny(&stop), std::make_pair(0, SIGTERM));  // both still run: the wait ends on the flag
  ASSERT_TRUE(p.KillGroup(*a, SIGTERM).ok());
  std::vector<std::pair<int, int>> ended = {*p.WaitAny(), *p.WaitAny()};
  std::sort(ended.begin(), ended.end());
  EXPECT_EQ(ended, (std::vector<std::pair<int, int>>{{std::min(*a, *b), 128 + SIGTERM}, {std::max(*a, *b), 128 + SIGTERM}}));
}

TEST(LaunchProcess, FakeRecordsGroupsAndGroupKills) {
  FakeProcessLauncher p(0);
  ASSERT_EQ(*p.Start({"kimi-plan"}, {}, 0), 1);
  ASSERT_EQ(*p.Start({"kimi-plan"}, {}, 1), 2);
  EXPECT_EQ(p.groups(), (std::vector<int>{0, 1}));
  ASSERT_TRUE(p.KillGroup(1, SIGTERM).ok());
  EXPECT_EQ(p.kills(), (std::vector<std::pair<int, int>>{{-1, SIGTERM}}));
  volatile std::sig_atomic_t stop = SIGINT;
  EXPECT_EQ(*p.WaitAny(&stop), std::make_pair(0, SIGINT));
}

}  // namespace
}  // namespace kp
