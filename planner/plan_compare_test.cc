#include "planner/plan_compare.h"

#include <gtest/gtest.h>

#include "planner/test_util.h"

namespace kp {
namespace {

PlanRequest Request() {
  PlanRequest r = testing::SeedRequest("kimi-k3-debug", "h100", 1);
  r.global_batch = 16;
  r.plan.tp = 2;
  r.plan.pp = 1;  // one pipeline rank: the worst rank is the same under both settings
  r.plan.dp = 4;
  r.plan.ep = 2;
  return r;
}

const PlanTerm& Find(const std::vector<PlanTerm>& terms, const std::string& name) {
  for (const PlanTerm& t : terms)
    if (t.name == name) return t;
  throw std::runtime_error("no term " + name);
}

TEST(PlanCompareTest, APlanBesideItselfDiffersNowhere) {
  const PlanRequest r = Request();
  Result<PlanEvaluation> e = PlanFixed(r, CountParams(r.model));
  ASSERT_TRUE(e.ok()) << e.status().message();
  for (const PlanTerm& t : CompareTerms(r, *e, r, *e)) EXPECT_FALSE(t.differs) << t.name;
}

// Full recomputation against none: the setting, the activations (less) and
// the compute (one more forward: F + B + W = 3F becomes 4F under the
// constant-efficiency pricing) differ; the weights and the DP sync do not.
TEST(PlanCompareTest, RecomputeChangesItsTermsOnly) {
  PlanRequest none = Request();
  none.calibration = nullptr;
  none.recompute = Recompute::kNone;
  PlanRequest full = none;
  full.recompute = Recompute::kFull;
  const ParamCount pc = CountParams(none.model);
  Result<PlanEvaluation> a = PlanFixed(none, pc), b = PlanFixed(full, pc);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<PlanTerm> terms = CompareTerms(none, *a, full, *b);
  EXPECT_TRUE(Find(terms, "recompute").differs);
  EXPECT_EQ(Find(terms, "recompute").a, "none");
  EXPECT_EQ(Find(terms, "recompute").b, "full");
  EXPECT_TRUE(Find(terms, "memory: activations").differs);
  EXPECT_GT(Find(terms, "memory: activations").a.get<double>(), Find(terms, "memory: activations").b.get<double>());
  EXPECT_FALSE(Find(terms, "memory: weights").differs);
  EXPECT_FALSE(Find(terms, "step: dp comm").differs);
  EXPECT_NEAR(Find(terms, "step: compute").b.get<double>() / Find(terms, "step: compute").a.get<double>(), 4.0 / 3.0,
              1e-9);
  const nlohmann::json j = TermsToJson(terms, "preset", "best");
  EXPECT_EQ(j.size(), terms.size());
  EXPECT_EQ(j[0]["term"], "cluster GPUs");
  EXPECT_TRUE(j[0].contains("preset") && j[0].contains("best"));
}

}  // namespace
}  // namespace kp
