#include "cli/log.h"

#include <map>
#include <sstream>

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

namespace kp {
namespace {

TEST(LogLevelTest, IsTakenOutOfTheArgumentsWhereverItStands) {
  std::vector<std::string> args = {"run", "--log-level", "warn", "--steps", "3", "--log-level=debug"};
  Result<std::string> level = TakeLogLevel(args);
  ASSERT_TRUE(level.ok()) << level.status().message();
  EXPECT_EQ(*level, "debug");  // the last one wins, as for any repeated flag
  EXPECT_EQ(args, (std::vector<std::string>{"run", "--steps", "3"}));

  std::vector<std::string> none = {"plan", "--", "--log-level", "x"};
  level = TakeLogLevel(none);
  ASSERT_TRUE(level.ok());
  EXPECT_EQ(*level, "info");
  EXPECT_EQ(none.size(), 4u);  // after "--" nothing is ours
}

TEST(LogLevelTest, AnUnknownLevelIsOneLineNamingTheAllowedOnes) {
  std::vector<std::string> args = {"run", "--log-level", "loud"};
  const Status s = TakeLogLevel(args).status();
  EXPECT_EQ(s.ExitCode(), 2);
  EXPECT_EQ(s.message(), "--log-level: must be trace, debug, info, warn, error or off, got \"loud\"");
  std::vector<std::string> dangling = {"run", "--log-level"};
  EXPECT_EQ(TakeLogLevel(dangling).status().ExitCode(), 2);
}

TEST(LoggerTest, WritesTaggedLinesAtOrAboveItsLevel) {
  std::ostringstream err;
  auto log = MakeLogger(err, "warn", "[rank 1] ");
  log->info("step 1/3");
  log->warn("slow peer");
  log->error("100% gone");
  EXPECT_EQ(err.str(), "[rank 1] slow peer\n[rank 1] 100% gone\n");

  std::ostringstream plain;
  MakeLogger(plain, "info", "")->info("step 1/3  loss 4.1");
  EXPECT_EQ(plain.str(), "step 1/3  loss 4.1\n");
}

TEST(LoggerTest, OnlyAMultiRankProcessIsTagged) {
  std::ostringstream out, err;
  FakeFileSystem fs;
  FakeClock clock;
  CliEnv env{out, err, fs, clock, {}};
  std::map<std::string, std::string> vars;
  env.getenv = [&](const char* name) { return vars.count(name) ? vars[name].c_str() : nullptr; };
  EXPECT_EQ(RankTag(env), "");
  vars = {{"RANK", "0"}, {"WORLD_SIZE", "1"}};
  EXPECT_EQ(RankTag(env), "");
  vars = {{"RANK", "3"}, {"WORLD_SIZE", "4"}};
  EXPECT_EQ(RankTag(env), "[rank 3] ");
  Progress(env, "no logger yet");  // before RunCli made one: straight to err
  EXPECT_EQ(err.str(), "no logger yet\n");
}

}  // namespace
}  // namespace kp
