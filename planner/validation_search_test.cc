#include "planner/validation_search.h"

#include <gtest/gtest.h>

#include "common/file_system.h"
#include "common/limits.h"
#include "planner/planner.h"

#ifndef KIMI_PLAN_MOE_VALIDATION_CASES
#define KIMI_PLAN_MOE_VALIDATION_CASES "tests/validation/megatron_moe_runs.json"
#endif

namespace kp {
namespace {

// The smallest published MoE run (Qwen3-30B-A3B on one 8-GPU B200 node):
// its space is small enough for a unit test.
ValidationCase SmallCase() {
  RealFileSystem fs;
  PresetCatalog catalog(fs, DefaultPresetDir());
  Result<std::string> text = fs.ReadFile(KIMI_PLAN_MOE_VALIDATION_CASES, limits::kMaxSpecFileBytes);
  EXPECT_TRUE(text.ok());
  Result<std::vector<ValidationCase>> cases = ParseValidationCases(*text, catalog);
  EXPECT_TRUE(cases.ok()) << cases.status().message();
  for (const ValidationCase& c : *cases)
    if (c.id == "mb-26.04.01-qwen3-30b-a3b-b200-mxfp8-n8-gbs512-mbs4-tp1pp1vp1ep8") return c;
  ADD_FAILURE() << "the case is gone from the file";
  return {};
}

TEST(ValidationSearch, RanksThePublishedLayoutAmongTheOnesThatFit) {
  const ValidationCase c = SmallCase();
  const Result<SearchCheck> s = CheckSearch(c);
  ASSERT_TRUE(s.ok()) << s.status().message();
  const ParamCount pc = CountParams(c.request.model);
  // The published figures are the plan's own, priced again here.
  const Result<PlanEvaluation> published = PlanFixed(c.request, pc);
  ASSERT_TRUE(published.ok());
  EXPECT_EQ(s->published_step_s, published->step.total.value());
  EXPECT_GE(s->published_rank, 1);
  EXPECT_GE(s->fitting, s->published_rank);
  // The fastest is what its own plan prices, fits, and is no slower.
  PlanRequest best = c.request;
  best.plan = s->best;
  best.schedule = s->best_schedule;
  best.layer_split = LayerSplit{LayerSplitKind::kAuto, {}};
  best.recipe.dispatcher = s->best_dispatcher;
  best.recipe.a2a_overlap = s->best_a2a_overlap;
  if (s->published_rank == 1) best = c.request;
  const Result<PlanEvaluation> e = PlanFixed(best, pc);
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_TRUE(e->memory.actor.fits());
  EXPECT_EQ(e->step.total.value(), s->best_step_s);
  EXPECT_LE(s->best_step_s, s->published_step_s);
  EXPECT_TRUE(s->EarnsKeep(5));
}

// A deliberately poor published layout (pp 2 where the run used none) is
// outranked; the check still holds because the top holds a faster one.
TEST(ValidationSearch, AFasterLayoutThatFitsEarnsTheKeep) {
  ValidationCase c = SmallCase();
  c.request.plan.pp = 2;
  c.request.plan.dp = 4;
  c.request.plan.ep = 4;
  c.request.layer_split = LayerSplit{LayerSplitKind::kMegatron, {}};
  const Result<SearchCheck> s = CheckSearch(c);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_LT(s->best_step_s, s->published_step_s);
  EXPECT_NE(s->published_rank, 1);
  EXPECT_TRUE(s->EarnsKeep(5));
  SearchCheck none;
  none.published_rank = 6;
  none.fitting = 0;
  EXPECT_FALSE(none.EarnsKeep(5));
}

}  // namespace
}  // namespace kp
