#include "planner/search.h"

#include <gtest/gtest.h>

#include "planner/constraints.h"
#include "planner/test_util.h"

namespace kp {
namespace {

PlanRequest Debug(int nodes) {
  PlanRequest r = testing::SeedRequest("kimi-k3-debug", "h100", nodes);
  r.global_batch = 64;
  r.search = true;
  r.top = 1000;
  return r;
}

// An independent brute force over every combination of sizes up to the
// world, filtered by the constraint checker, must give the same count.
TEST(SearchTest, EnumeratesEveryValidPlan) {
  PlanRequest r = Debug(2);
  long long brute = 0;
  const int world = r.world();
  for (int tp = 1; tp <= world; ++tp)
    for (int pp = 1; pp <= world; ++pp)
      for (int cp = 1; cp <= world; ++cp) {
        if (world % (tp * pp * cp)) continue;
        for (int ep = 1; ep <= world; ++ep)
          for (int etp = 1; etp <= world; ++etp) {
            ParallelPlan p;
            p.tp = tp; p.pp = pp; p.cp = cp; p.dp = world / (tp * pp * cp); p.ep = ep; p.etp = etp;
            // The search restricts etp to divisors of tp and cp to powers of two up to 16.
            if (tp % etp || (cp & (cp - 1)) || cp > 16) continue;
            if (CheckPlan(r, p).empty()) ++brute;
          }
      }
  EXPECT_EQ(static_cast<long long>(EnumeratePlans(r).size()), brute);
  EXPECT_GT(brute, 20);
}

TEST(SearchTest, ReturnsFeasiblePlansFastestFirst) {
  PlanRequest r = Debug(1);
  const ParamCount pc = CountParams(r.model);
  SearchResult s = SearchPlans(r, pc);
  ASSERT_FALSE(s.best.empty());
  EXPECT_EQ(s.feasible, static_cast<long long>(s.best.size()));
  EXPECT_EQ(s.evaluated, static_cast<long long>(EnumeratePlans(r).size()));
  for (size_t i = 0; i < s.best.size(); ++i) {
    EXPECT_TRUE(s.best[i].feasible());
    EXPECT_TRUE(CheckPlan(r, s.best[i].plan).empty());
    if (i) {
      EXPECT_GE(s.best[i - 1].step.tokens_per_s_per_gpu, s.best[i].step.tokens_per_s_per_gpu);
    }
  }
}

TEST(SearchTest, TopLimitsTheList) {
  PlanRequest r = Debug(1);
  r.top = 3;
  SearchResult s = SearchPlans(r, CountParams(r.model));
  EXPECT_EQ(s.best.size(), 3u);
  EXPECT_GT(s.feasible, 3);
}

TEST(SearchTest, RolloutChoiceIsTheSmallestEngineThatFits) {
  PlanRequest r = testing::SeedRequest("kimi-k2.6", "h200", 2);
  auto roll = ChooseRollout(r, CountParams(r.model));
  ASSERT_TRUE(roll.has_value());
  // 595 GB of INT4 weights do not fit in 0.5 x 141 GB x 8; 16 GPUs do.
  EXPECT_EQ(roll->rollout_gpus_per_engine(), 16);
  EXPECT_EQ(roll->rollout_ep, 16);
}

}  // namespace
}  // namespace kp
