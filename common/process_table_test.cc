#include "common/process_table.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

namespace kp {
namespace {

TEST(ProcessTableTest, ThisProcessIsAlive) {
  RealProcessTable t;
  const ProcessId self = t.Self();
  EXPECT_FALSE(self.host.empty());
  EXPECT_EQ(self.pid, getpid());
  EXPECT_EQ(t.Check(self), Liveness::kAlive);
}

TEST(ProcessTableTest, AReapedChildIsGone) {
  RealProcessTable t;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(t.Check({t.Self().host, child}), Liveness::kGone);
}

TEST(ProcessTableTest, AnotherHostOrNoPidIsUnknown) {
  RealProcessTable t;
  EXPECT_EQ(t.Check({t.Self().host + "-elsewhere", getpid()}), Liveness::kUnknown);
  EXPECT_EQ(t.Check({t.Self().host, 0}), Liveness::kUnknown);
  EXPECT_EQ(t.Check({"", getpid()}), Liveness::kUnknown);
}

TEST(ProcessTableTest, FakeAnswersWhatTheTestSet) {
  FakeProcessTable t(7);
  EXPECT_EQ(t.Check(t.Self()), Liveness::kAlive);
  t.SetAlive(7, false);
  EXPECT_EQ(t.Check({"fake-host", 7}), Liveness::kGone);
  EXPECT_EQ(t.Check({"other", 7}), Liveness::kUnknown);
}

}  // namespace
}  // namespace kp
