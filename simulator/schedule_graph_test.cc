#include "simulator/schedule_graph.h"

#include <gtest/gtest.h>

#include "simulator/pipeline_sim.h"
#include "schedules/schedule_generators.h"

namespace kp {
namespace {

PipelineSchedule Csv(const std::string& text, int stages, int mbs) {
  auto s = ParseCsv(text, stages, mbs, "loop");
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : PipelineSchedule{};
}

std::string Names(const std::vector<ScheduledAction>& path) {
  std::string out;
  for (const ScheduledAction& a : path)
    out += (out.empty() ? "" : " ") + std::to_string(a.rank) + ":" + a.action.ToString();
  return out;
}

TransferCost Fixed(Nanoseconds c) {
  return [c](int, int, int, bool) { return c; };
}

// Rank 0 takes micro-batch 1's input-gradient before micro-batch 1's
// forward; rank 1 can produce that gradient only after running the forward,
// which needs rank 0's output of the forward rank 0 has not reached.
const char* const kCrossedCsv =
    "0F0,0I1,0F1,0I0,0W0,0W1\n"
    "1F0,1I0,1W0,1F1,1I1,1W1\n";

TEST(ScheduleGraphTest, RejectsADeadlockNamingTheCycle) {
  const PipelineSchedule s = Csv(kCrossedCsv, 2, 2);
  const Status st = CheckDeadlockFree(s);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(),
            "deadlock: rank 0 waits at 0I1 for 1I1 on rank 1, listed after 1F1 -> rank 1 waits at 1F1 for 0F1 on "
            "rank 0, listed after 0I1 -> back to rank 0 at 0I1");
}

TEST(ScheduleGraphTest, NamesTheCycleThroughListedCommunication) {
  auto lowered = AddCommunication(Csv(kCrossedCsv, 2, 2));
  ASSERT_TRUE(lowered.ok());
  const Status st = CheckDeadlockFree(*lowered);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(),
            "deadlock: rank 0 waits at 0RECV_B1 for 1SEND_B1 on rank 1, listed after 1RECV_F1 -> rank 1 waits at "
            "1RECV_F1 for 0SEND_F1 on rank 0, listed after 0RECV_B1 -> back to rank 0 at 0RECV_B1");
}

TEST(ScheduleGraphTest, NamesAWaitOnTheSameRank) {
  // The last stage lists a backward before its own forward.
  const Status st = CheckDeadlockFree(Csv("0F0,0B0\n1B0,1F0\n", 2, 1));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "deadlock: rank 1 waits at 1B0 for 1F0 on rank 1, listed after 1B0 -> back to rank 1 at 1B0");
}

TEST(ScheduleGraphTest, TheSimulatorReportsTheSameDeadlock) {
  const PipelineSchedule s = Csv(kCrossedCsv, 2, 2);
  auto r = SimulatePipeline(s, StageCosts{Nanoseconds(1), Nanoseconds(1), Nanoseconds(1), Nanoseconds(1)});
  ASSERT_FALSE(r.ok());
  // It runs the lowered lists, so it names the stuck transfers.
  EXPECT_EQ(r.status().message(), CheckDeadlockFree(*AddCommunication(s)).message());
}

TEST(ScheduleGraphTest, ResolvesDependenciesAcrossAndWithinRanks) {
  // V placement on 2 ranks: 0 | 1 2 | 3; the 1 -> 2 boundary stays on rank 1.
  auto s = GenerateSchedule(ScheduleKind::kZbv, 2, 1, 4);
  ASSERT_TRUE(s.ok());
  auto index = IndexActions(*s);
  ASSERT_TRUE(index.ok());
  auto find = [&](const std::string& name) -> const ActionNode& {
    for (const ActionNode& n : index->nodes)
      if (n.action.ToString() == name) return n;
    ADD_FAILURE() << name;
    return index->nodes[0];
  };
  auto dep = [&](const std::string& name) {
    const ActionNode& n = find(name);
    return n.dep < 0 ? std::string("-") : index->nodes[n.dep].action.ToString() + (n.transfer ? "+C" : "");
  };
  EXPECT_EQ(dep("0F2"), "-");
  EXPECT_EQ(dep("1F2"), "0F2+C");
  EXPECT_EQ(dep("2F2"), "1F2");     // same rank: no transfer
  EXPECT_EQ(dep("3F2"), "2F2+C");
  EXPECT_EQ(dep("3I2"), "3F2");     // the last stage turns around
  EXPECT_EQ(dep("2I2"), "3I2+C");
  EXPECT_EQ(dep("1I2"), "2I2");
  EXPECT_EQ(dep("0W2"), "0I2");
  EXPECT_EQ(index->rank_begin, (std::vector<int>{0, 24, 48}));
}

// Hand-worked: pp 2, M 2, 1F1B, F 1, B 2, W 0, C 1. Rank 0: F0 [0,1], F1
// [1,2]; rank 1: F0 [2,3] (transfer), B0 [3,5], F1 [5,6], B1 [6,8]; rank 0:
// B0 [6,8], B1 [9,11]. The last action waits on B1's gradient, which waits
// on rank 1's program order back to F0's transfer.
TEST(ScheduleGraphTest, CriticalPathOfAHandWorkedOneFOneB) {
  auto s = GenerateSchedule(ScheduleKind::k1F1B, 2, 1, 2);
  ASSERT_TRUE(s.ok());
  const ActionCost cost = CostsPerAction({Nanoseconds(1), Nanoseconds(2), Nanoseconds(0), Nanoseconds(1)}, 1);
  auto cp = CriticalPath(*s, cost, Fixed(Nanoseconds(1)));
  ASSERT_TRUE(cp.ok()) << cp.status().message();
  EXPECT_EQ(cp->length.value(), 11);
  EXPECT_EQ(Names(cp->actions), "0:0F0 1:1F0 1:1B0 1:1F1 1:1B1 0:0B1");
  auto lowered_cp = CriticalPath(*AddCommunication(*s), cost, Fixed(Nanoseconds(1)));
  ASSERT_TRUE(lowered_cp.ok());
  EXPECT_EQ(lowered_cp->length.value(), 11);
  EXPECT_EQ(Names(lowered_cp->actions),
            "0:0F0 0:0SEND_F0 1:1RECV_F0 1:1F0 1:1B0 1:1SEND_B0 1:1RECV_F1 1:1F1 1:1B1 1:1SEND_B1 0:0RECV_B1 0:0B1");
}

// Two independent computations of one number: the longest path through the
// dependency graph and the event-driven simulation's makespan.
TEST(ScheduleGraphTest, CriticalPathLengthIsTheSimulatedMakespan) {
  const StageCosts costs{Nanoseconds(3000), Nanoseconds(5000), Nanoseconds(2000), Nanoseconds(700)};
  const struct {
    ScheduleKind kind;
    int pp, vp, m;
  } cases[] = {{ScheduleKind::kGpipe, 4, 1, 6},  {ScheduleKind::k1F1B, 4, 1, 9},
               {ScheduleKind::kInterleaved1F1B, 4, 2, 8}, {ScheduleKind::kZbH1, 5, 1, 10},
               {ScheduleKind::kZbH2, 4, 1, 12}, {ScheduleKind::kZbv, 4, 1, 8},
               {ScheduleKind::kDualPipeV, 4, 1, 10}};
  for (const auto& c : cases) {
    auto s = GenerateSchedule(c.kind, c.pp, c.vp, c.m);
    ASSERT_TRUE(s.ok());
    auto sim = SimulatePipeline(*s, costs);
    ASSERT_TRUE(sim.ok()) << sim.status().message();
    auto cp = CriticalPath(*s, CostsPerAction(costs, s->StagesPerRank()), Fixed(costs.p2p));
    ASSERT_TRUE(cp.ok());
    EXPECT_EQ(cp->length, sim->makespan) << ScheduleName(c.kind);
    // The path is a chain: each action starts where the one before it ends
    // (plus a transfer); it begins at time 0 and ends at the makespan.
    ASSERT_FALSE(cp->actions.empty());
    EXPECT_EQ(cp->actions.front().action.type, ActionType::kForward);
    EXPECT_EQ(cp->actions.front().action.stage, 0);
  }
}

TEST(ScheduleGraphTest, CriticalPathRefusesADeadlock) {
  auto cp = CriticalPath(Csv(kCrossedCsv, 2, 2), [](const PipelineAction&) { return Nanoseconds(1); },
                         Fixed(Nanoseconds(0)));
  ASSERT_FALSE(cp.ok());
  EXPECT_EQ(cp.status().message().rfind("deadlock: ", 0), 0u);
}

}  // namespace
}  // namespace kp
