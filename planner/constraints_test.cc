#include "planner/constraints.h"

#include <gtest/gtest.h>

#include "planner/test_util.h"

namespace kp {
namespace {

PlanRequest H200Full() {
  PlanRequest r = testing::SeedRequest("kimi-k2.6", "h200", 16);
  r.plan = ParallelPlan{8, 2, 1, 8, 1, 1, 8, 8, 8, 1};
  return r;
}

std::string First(const PlanRequest& r) {
  auto v = CheckPlan(r, r.plan);
  return v.empty() ? "" : v.front();
}

bool Mentions(const PlanRequest& r, const std::string& message) {
  for (const std::string& v : CheckPlan(r, r.plan))
    if (v == message) return true;
  return false;
}

TEST(ConstraintsTest, TheSeedLayoutIsValid) { EXPECT_EQ(First(H200Full()), ""); }

TEST(ConstraintsTest, EveryRuleHasItsMessage) {
  PlanRequest r = H200Full();
  r.plan.dp = 4;
  EXPECT_EQ(First(r), "--dp: tp x pp x cp x dp = 8 x 2 x 1 x 4 = 64, but the actor has 128 GPUs");

  r = H200Full();
  r.plan.tp = 3;
  r.gpus_per_node = 8;
  EXPECT_TRUE(Mentions(r, "--tp: 3 does not divide the 64 attention heads"));

  r = H200Full();
  r.plan.ep = 7;
  auto v = CheckPlan(r, r.plan);
  EXPECT_EQ(v.front(), "--ep: 7 does not divide the 384 experts");

  r = H200Full();
  r.plan.ep = 128;
  v = CheckPlan(r, r.plan);
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v.front(), "--ep: ep x etp = 128 must divide tp x dp x cp = 64 (Megatron's expert-parallel folding)");

  r = H200Full();
  r.plan.vp = 2;
  EXPECT_EQ(First(r), "--vp: 1f1b has one stage per rank; use interleaved-1f1b for vp > 1");

  r = H200Full();
  r.plan.pp = 64; r.plan.dp = 1; r.plan.ep = 2; r.plan.tp = 2;
  EXPECT_TRUE(Mentions(r, "--pp/--vp: 64 stages exceed the 63 units (embedding + 61 layers + head)"));

  r = H200Full();
  r.prompt_length = 1000; r.response_length = 1; r.plan.cp = 2; r.plan.dp = 4;
  EXPECT_EQ(First(r), "--cp: 2 must split the 1001-token sequence into 2 x cp equal chunks (load-balanced context parallelism)");

  r = H200Full();
  r.global_batch = 4;
  EXPECT_EQ(First(r), "--global-batch: 4 sequences (global batch x rollout n) do not divide into dp x micro-batch = 8");

  r = H200Full();
  r.plan.rollout_ep = 16;
  EXPECT_EQ(First(r), "--rollout-ep: with expert parallelism on, rollout ep must equal rollout tp x rollout dp = 8 (Verl/vLLM), got 16");

  r = H200Full();
  r.plan.rollout_tp = 3; r.plan.rollout_ep = 3;
  EXPECT_EQ(First(r), "--rollout-tp: 3 does not divide the 64 attention heads");

  r = H200Full();
  r.plan.tp = 16; r.plan.dp = 4;
  EXPECT_EQ(First(r), "--tp: 16 spans nodes of 8 GPUs; keep TP inside the NVLink domain");

  r = H200Full();
  r.schedule = ScheduleKind::kInterleaved1F1B;
  r.plan.vp = 2;
  r.global_batch = 24;  // 3 micro-batches per DP rank, not a multiple of pp = 2
  EXPECT_EQ(First(r), "--global-batch: interleaved-1f1b needs the 3 micro-batches per DP rank to be a multiple of pp = 2");
}

TEST(ConstraintsTest, ExpertTensorAndVShapedRules) {
  PlanRequest r = H200Full();
  r.plan.etp = 3;
  r.plan.ep = 1;
  EXPECT_TRUE(Mentions(r, "--etp: 3 does not divide the expert FFN width 2048"));
  r = H200Full();
  r.schedule = ScheduleKind::kZbv;
  r.plan.pp = 1; r.plan.dp = 16;
  EXPECT_TRUE(Mentions(r, "--pp: zbv needs at least 2 ranks"));
  r = H200Full();
  r.schedule = ScheduleKind::kDualPipeV;
  r.plan.vp = 2;
  EXPECT_TRUE(Mentions(r, "--vp: dualpipev has one stage per rank pair (always 2); leave --vp at 1"));
  r = H200Full();
  r.schedule = ScheduleKind::kZbv;
  r.global_batch = 24;  // 3 micro-batches per DP rank, fewer than 2 x pp
  EXPECT_TRUE(Mentions(r, "--global-batch: zbv needs at least 2 x pp = 4 micro-batches per DP rank, got 3"));
}

TEST(ConstraintsTest, RolloutEnginesMustTileTheirGpus) {
  PlanRequest r = H200Full();
  r.placement = Placement::kSplit;
  r.rollout_gpus = 12;
  r.plan.dp = 8;
  r.plan.tp = 4; r.plan.pp = 29; // irrelevant: only the rollout rule is looked for
  EXPECT_TRUE(Mentions(r, "--rollout-tp: engines of rollout tp x dp = 8 GPUs do not tile the 12 rollout GPUs"));
}

TEST(ConstraintsTest, DenseModelsTakeNoExpertParallelism) {
  PlanRequest r;
  r.model = testing::Gpt(4, 1024, 16, 1000);
  r.gpu = testing::Gpu("h100");
  r.plan.ep = 2; r.plan.dp = 8;
  EXPECT_EQ(CheckPlan(r, r.plan).front(), "--ep: the model is dense; ep and etp must be 1");
}

// Megatron-core's conditions for overlapping the expert exchange.
TEST(ConstraintsTest, ExpertExchangeOverlapIsWhereMegatronRunsIt) {
  PlanRequest r = H200Full();  // pp 2 under 1f1b, ep 8
  r.recipe.a2a_overlap = true;
  const std::string why = "--a2a-overlap: Megatron overlaps the expert exchange only ";
  EXPECT_TRUE(Mentions(r, why + "with pp 1 or an interleaved pipeline (vp > 1); the plan has pp 2 under 1f1b"));
  r.schedule = ScheduleKind::kInterleaved1F1B;
  r.plan.vp = 2;
  EXPECT_FALSE(Mentions(r, why + "with pp 1 or an interleaved pipeline (vp > 1); the plan has pp 2 under 1f1b"));
  r.recompute = Recompute::kFull;
  EXPECT_TRUE(Mentions(r, why + "without full recomputation"));
  r.recompute = Recompute::kSelective;
  r.recipe.recompute_modules = {RecomputeModule::kMoe};
  EXPECT_TRUE(Mentions(r, why + "without the moe module recomputed"));
  r.recipe.recompute_modules = {RecomputeModule::kMoeAct};
  r.plan.ep = 1;
  EXPECT_TRUE(Mentions(r, why + "with expert parallelism (ep > 1), and ep is 1"));
}

TEST(ConstraintsTest, RequestValuesAreChecked) {
  PlanRequest r = H200Full();
  EXPECT_TRUE(ValidateRequest(r).ok());
  r.nodes = 0;
  EXPECT_EQ(ValidateRequest(r).message(), "--nodes: must be a positive integer, got 0");
  r = H200Full();
  r.micro_batch = -1;
  EXPECT_EQ(ValidateRequest(r).message(), "--micro-batch: must be a positive integer, got -1");
  r = H200Full();
  r.gpu_memory_utilization = 1.5;
  EXPECT_EQ(ValidateRequest(r).message(), "--gpu-memory-utilization: must be in (0, 1)");
  r = H200Full();
  r.placement = Placement::kSplit;
  r.rollout_gpus = 0;
  EXPECT_EQ(ValidateRequest(r).message().rfind("--rollout-gpus:", 0), 0u);
  r = H200Full();
  r.efficiency.moe_imbalance = 0.5;
  EXPECT_EQ(ValidateRequest(r).message(), "--moe-imbalance: must be >= 1");
}

// Megatron-LM's recompute method and layer count belong to full recomputation.
TEST(ConstraintsTest, RecomputeMethodAndLayersNeedFullRecompute) {
  PlanRequest r = H200Full();
  r.recompute = Recompute::kFull;
  r.recompute_method = RecomputeMethod::kBlock;
  r.recompute_layers = 3;
  EXPECT_TRUE(ValidateRequest(r).ok());
  r.recompute_layers = 0;
  EXPECT_EQ(ValidateRequest(r).message(), "--recompute-num-layers: must be a positive integer, got 0");
  r.recompute_layers = 3;
  r.recompute = Recompute::kSelective;
  EXPECT_EQ(ValidateRequest(r).message(), "--recompute-method: applies to --recompute full only, got --recompute selective");
  r.recompute_method = RecomputeMethod::kUniform;
  r.recompute = Recompute::kNone;
  EXPECT_EQ(ValidateRequest(r).message(), "--recompute-num-layers: applies to --recompute full only, got --recompute none");
}

}  // namespace
}  // namespace kp
