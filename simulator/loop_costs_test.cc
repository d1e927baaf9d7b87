#include "simulator/loop_costs.h"

#include <gtest/gtest.h>

#include "planner/step_time.h"
#include "planner/test_util.h"

namespace kp {
namespace {

PlanRequest SmallGpt() {
  PlanRequest r;
  r.model = testing::Gpt(4, 1024, 16, 32000);
  r.model.dropout = false;
  r.gpu = testing::Gpu("h100");
  r.nodes = 1;
  r.gpus_per_node = 8;
  r.prompt_length = 512;
  r.response_length = 512;
  r.global_batch = 64;
  r.plan.dp = 8;
  return r;
}

// A dense model small enough that every engine decodes all its samples at
// once: decoding reads the weights and half of each sequence's KV cache per
// token; prefill is compute bound.
TEST(LoopCostsTest, RolloutIsARooflineOfTheEngine) {
  PlanRequest r = SmallGpt();
  const ParamCount pc = CountParams(r.model);
  auto e = PlanFixed(r, pc);
  ASSERT_TRUE(e.ok());
  RolloutEstimate ro = EstimateRollout(r, *e, pc, 0.7);
  EXPECT_EQ(ro.engines, 8);
  EXPECT_EQ(ro.samples_per_engine, 8);
  EXPECT_EQ(ro.concurrency, 8);
  EXPECT_EQ(ro.waves, 1);
  const double kv = 4.0 * 1024 * 2 * 2 * 1024;  // layers x tokens x (k, v) x bf16 x kv width
  EXPECT_DOUBLE_EQ(e->memory.rollout_kv_per_sequence.value(), kv);
  const double decode = (2 * pc.total + 8 * kv / 2) / (3.35e12 * 0.7);
  EXPECT_NEAR(ro.decode_step.value(), decode, 1e-15);
  const double peak = 989e12 * 0.55;
  const double prefill = ModelTrainFlopsPerToken(r.model, pc, 512) / 3 * 512 * 8 / peak;
  EXPECT_NEAR(ro.prefill.value(), prefill, 1e-15);
  EXPECT_NEAR(ro.total.value(), prefill + 512 * decode, 1e-12);
}

TEST(LoopCostsTest, TeacherFeedbackAndTrainComeFromThePlan) {
  PlanRequest r = SmallGpt();
  const ParamCount pc = CountParams(r.model);
  auto e = PlanFixed(r, pc);
  ASSERT_TRUE(e.ok());
  LoopCostOptions o;
  o.sync = Seconds(0.25);
  auto b = EstimateLoopCosts(r, *e, pc, o);
  ASSERT_TRUE(b.ok()) << b.status().message();
  const double tokens = 64.0 * (512 + 256 + 512);
  EXPECT_DOUBLE_EQ(b->teacher_tokens, tokens);
  EXPECT_NEAR(b->costs.teacher.value(), ModelTrainFlopsPerToken(r.model, pc, 1280) / 3 * tokens / (989e12 * 0.55 * 8), 1e-15);
  EXPECT_DOUBLE_EQ(b->costs.feedback.value(), 0.05);  // 64 samples over 64 workers
  EXPECT_DOUBLE_EQ(b->costs.train.value(), e->step.total.value());
  EXPECT_DOUBLE_EQ(b->costs.sync.value(), 0.25);
  o.verifier_workers = 0;
  EXPECT_EQ(EstimateLoopCosts(r, *e, pc, o).status().message(), "--verifier-workers: must be a positive integer");
}

}  // namespace
}  // namespace kp
