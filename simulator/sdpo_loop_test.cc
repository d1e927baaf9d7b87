#include "simulator/sdpo_loop.h"

#include <gtest/gtest.h>

namespace kp {
namespace {

LoopCosts Costs() {
  LoopCosts c;
  c.rollout = Seconds(10);
  c.feedback = Seconds(2);
  c.teacher = Seconds(3);
  c.train = Seconds(5);
  c.sync = Seconds(1);
  return c;
}

// Colocated, every system waits for the one before: a step is the sum, 21 s.
TEST(SdpoLoopTest, ColocatedStepIsTheSumOfTheSystems) {
  LoopOptions o;
  o.actor_gpus = 16;
  o.steps = 5;
  auto r = SimulateLoop(Costs(), o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_DOUBLE_EQ(r->step_time.value(), 21);
  EXPECT_DOUBLE_EQ(r->makespan.value(), 5 * 21);
  EXPECT_DOUBLE_EQ(r->share[int(LoopSystem::kRollout)], 10.0 / 21);
  // GPUs compute in rollout, teacher and training: 18 of every 21 s.
  EXPECT_DOUBLE_EQ(r->gpu_idle_fraction, 1 - 18.0 / 21);
  EXPECT_EQ(r->timeline.size(), 5u * kLoopSystems);
}

// On separate pools but strictly on-policy, nothing overlaps either; the
// rollout pool idles while the actor trains and vice versa.
TEST(SdpoLoopTest, SplitOnPolicyIsSerialAndIdlesBothPools) {
  LoopOptions o;
  o.placement = LoopPlacement::kSplit;
  o.actor_gpus = 8;
  o.rollout_gpus = 8;
  o.steps = 5;
  auto r = SimulateLoop(Costs(), o);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->step_time.value(), 21);
  // Busy GPU-seconds per step: rollout 10 x 8 + (teacher + train) 8 x 8 = 144 of 21 x 16.
  EXPECT_DOUBLE_EQ(r->gpu_idle_fraction, 1 - 144.0 / (21 * 16));
}

// One step off-policy: rollout k needs the weights of step k-2, so two steps
// share one 21 s dependency chain: 10.5 s per step, just above the rollout
// pool's 10 s of work.
TEST(SdpoLoopTest, OffPolicyOverlapHalvesTheChain) {
  LoopOptions o;
  o.placement = LoopPlacement::kSplit;
  o.actor_gpus = 8;
  o.rollout_gpus = 8;
  o.off_policy_overlap = true;
  o.steps = 9;
  auto r = SimulateLoop(Costs(), o);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->step_time.value(), 10.5, 1e-9);
}

// When rollout dominates, overlap is bounded by the rollout pool itself.
TEST(SdpoLoopTest, OverlapIsBoundedByTheBusiestPool) {
  LoopCosts c = Costs();
  c.rollout = Seconds(30);
  LoopOptions o;
  o.placement = LoopPlacement::kSplit;
  o.actor_gpus = 8;
  o.rollout_gpus = 8;
  o.off_policy_overlap = true;
  o.steps = 8;
  auto r = SimulateLoop(c, o);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->step_time.value(), 30, 1e-9);
}

TEST(SdpoLoopTest, BadOptionsNameTheField) {
  LoopOptions o;
  o.actor_gpus = 8;
  o.steps = 1;
  EXPECT_EQ(SimulateLoop(Costs(), o).status().message(),
            "--steps: must be at least 2 to reach a steady state, got 1");
  o.steps = 4;
  o.off_policy_overlap = true;
  EXPECT_EQ(SimulateLoop(Costs(), o).status().message().rfind("--off-policy:", 0), 0u);
  LoopCosts c = Costs();
  c.sync = Seconds(-1);
  o.off_policy_overlap = false;
  EXPECT_EQ(SimulateLoop(c, o).status().message(), "--sync-s: must be >= 0");
}

TEST(SdpoLoopTest, TimelineSvgHasOneBoxPerTask) {
  LoopOptions o;
  o.actor_gpus = 8;
  o.steps = 3;
  auto r = SimulateLoop(Costs(), o);
  ASSERT_TRUE(r.ok());
  const std::string svg = LoopTimelineSvg(*r);
  size_t boxes = 0;
  for (size_t p = svg.find("<title>"); p != std::string::npos; p = svg.find("<title>", p + 1)) ++boxes;
  EXPECT_EQ(boxes, 3u * kLoopSystems);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
}

// Zero costs: the loop takes no time, so nothing has a share of it and
// nothing idles, rather than 0 / 0 (issue 28).
TEST(SdpoLoopTest, ZeroCostsGiveZeroSharesNotNan) {
  LoopOptions o;
  o.actor_gpus = 8;
  auto r = SimulateLoop(LoopCosts{}, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->step_time.value(), 0);
  EXPECT_EQ(r->gpu_idle_fraction, 0);
  for (double share : r->share) EXPECT_EQ(share, 0);
}

// The clock holds 100 years: more work than that is refused before any runs.
TEST(SdpoLoopTest, WorkBeyondTheClockIsRefusedFirst) {
  LoopCosts year;
  year.rollout = year.feedback = year.teacher = year.train = year.sync = Seconds(365.0 * 24 * 3600);
  LoopOptions o;
  o.actor_gpus = 8;
  o.steps = 10000;
  const Status s = SimulateLoop(year, o).status();
  EXPECT_EQ(s.ExitCode(), 2);
  EXPECT_EQ(s.message().rfind("--steps: 10000 steps of up to 157680000 s each may last beyond", 0), 0u) << s.message();
  o.steps = 19;  // 95 years of work at most
  EXPECT_TRUE(SimulateLoop(year, o).ok());
}

}  // namespace
}  // namespace kp
