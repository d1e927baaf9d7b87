#include "planner/planner.h"
#include "planner/schedule_model.h"

#include <gtest/gtest.h>

#include "planner/plan_json.h"
#include "planner/search.h"
#include "planner/test_util.h"

namespace kp {
namespace {

PlanRequest Seed(const std::string& gpu, int nodes, ParallelPlan p, TrainMode mode) {
  PlanRequest r = testing::SeedRequest("kimi-k2.6", gpu, nodes);
  r.plan = p;
  r.mode = mode;
  return r;
}

// Full fine-tuning needs 18 bytes per parameter of mixed-precision Adam state
// (2 weights + 4 gradients + 12 optimizer): 18.5 TB for 1.03T parameters,
// more than 128 x 141 GB = 18.0 TB, so h200-full cannot fit whatever the
// layout. The planner's verdict must say so, naming the actor.
TEST(PlannerTest, SeedH200FullDoesNotFit) {
  PlanRequest r = Seed("h200", 16, ParallelPlan{8, 2, 1, 8, 1, 1, 8, 8, 8, 1}, TrainMode::kFull);
  const ParamCount pc = CountParams(r.model);
  EXPECT_GT(18 * pc.total, 128 * r.gpu.memory.value());
  auto e = PlanFixed(r, pc);
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_FALSE(e->feasible());
  EXPECT_EQ(e->violations.front().rfind("actor: needs", 0), 0u) << e->violations.front();
  EXPECT_FALSE(e->memory.actor.fits());
  // And no other layout of the same 128 GPUs fits either.
  PlanRequest s = r;
  s.search = true;
  EXPECT_TRUE(SearchPlans(s, pc).best.empty());
}

TEST(PlannerTest, NearestFitForH200FullIsLargerAndFeasible) {
  PlanRequest r = Seed("h200", 16, ParallelPlan{8, 2, 1, 8, 1, 1, 8, 8, 8, 1}, TrainMode::kFull);
  const ParamCount pc = CountParams(r.model);
  auto n = FindNearestFit(r, pc);
  ASSERT_TRUE(n.has_value());
  EXPECT_GT(n->nodes, 16);
  EXPECT_TRUE(n->evaluation.feasible());
  EXPECT_EQ(n->evaluation.plan.world(), n->nodes * 8);
  // 18 bytes per parameter must fit in the larger cluster's memory.
  EXPECT_LT(18 * pc.total, n->nodes * 8 * r.gpu.memory.value());
}

TEST(PlannerTest, SeedH200LoraOverflowsOnTheExpertShards) {
  PlanRequest r = Seed("h200", 2, ParallelPlan{4, 1, 1, 4, 1, 1, 4, 8, 8, 1}, TrainMode::kLora);
  const ParamCount pc = CountParams(r.model);
  auto e = PlanFixed(r, pc);
  ASSERT_TRUE(e.ok());
  // EP 4 leaves a quarter of the 1.01T expert parameters on each GPU: even
  // frozen, in bf16 that is about 508 GB.
  EXPECT_NEAR(e->memory.actor.weights.value() / 1e9, 2 * pc.sum.routed_experts / 4 / 1e9, 10);
  EXPECT_FALSE(e->feasible());
}

TEST(PlannerTest, ARejectedLayoutIsAnInvalidArgument) {
  PlanRequest r = Seed("h200", 16, ParallelPlan{8, 2, 1, 7, 1, 1, 8, 8, 8, 1}, TrainMode::kFull);
  auto e = PlanFixed(r, CountParams(r.model));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().ExitCode(), 2);
  EXPECT_EQ(e.status().message(), "--ep: 7 does not divide the 384 experts");
}

TEST(PlannerTest, SmallModelFitsAndReportsConsistentFigures) {
  PlanRequest r = testing::SeedRequest("kimi-k3-debug", "h100", 1);
  r.plan = ParallelPlan{2, 2, 1, 2, 1, 1, 2, 1, 1, 1};
  r.plan.rollout_ep = 1;
  const ParamCount pc = CountParams(r.model);
  auto e = PlanFixed(r, pc);
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_TRUE(e->feasible()) << (e->violations.empty() ? "" : e->violations.front());
  EXPECT_NEAR(e->step.tokens_per_s_per_gpu * e->step.total.value() * 8, e->step.tokens_per_step, 1e-3);
  EXPECT_GT(e->step.mfu, 0);
  EXPECT_LT(e->step.mfu, 1);
}

TEST(PlannerTest, RequestsRoundTripThroughTheirRecord) {
  PlanRequest r = Seed("h200", 2, ParallelPlan{4, 1, 1, 4, 1, 1, 4, 8, 8, 1}, TrainMode::kLora);
  r.lora.experts = LoraExperts::kPerExpert;
  r.recompute = Recompute::kFull;
  r.recompute_method = RecomputeMethod::kBlock;
  r.recompute_layers = 3;
  r.schedule = ScheduleKind::kZbH1;
  r.efficiency.moe_imbalance = 1.5;
  auto back = RequestFromJson(RequestToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(RequestToJson(*back), RequestToJson(r));
  EXPECT_EQ(back->recompute_method, RecomputeMethod::kBlock);
  EXPECT_EQ(back->recompute_layers, 3);
  // A record from before the methods recomputed fully as uniform 1.
  nlohmann::json old = RequestToJson(r);
  old.erase("recompute_method");
  old.erase("recompute_num_layers");
  auto plain = RequestFromJson(old);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->recompute_method, RecomputeMethod::kUniform);
  EXPECT_EQ(plain->recompute_layers, 1);
  const ParamCount pc = CountParams(r.model);
  auto a = PlanFixed(r, pc), b = PlanFixed(*back, pc);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->step.total, b->step.total);
  EXPECT_EQ(a->memory.actor.total(), b->memory.actor.total());
  EXPECT_FALSE(RequestFromJson(nlohmann::json{{"nodes", 1}}).ok());
}

// The 1T GPT of Korthikanti et al. (2022), Table 1: 128 layers, hidden
// 25600, 160 heads, sequence 2048, vocabulary 51200, on tp 8 x pp 64.
PlanRequest Gpt1T(LayerSplitKind split) {
  PlanRequest r;
  r.model = testing::Gpt(128, 25600, 160, 51200);
  r.gpu = testing::Gpu("h200");
  r.nodes = 64;
  r.gpus_per_node = 8;
  r.prompt_length = 2048;
  r.response_length = 0;
  r.global_batch = 128;
  r.flash_attention = false;  // the paper's eager attention; selective recomputation drops its s^2 term
  r.plan.tp = 8;
  r.plan.pp = 64;
  r.plan.dp = 1;
  r.layer_split.kind = split;
  return r;
}

// Megatron's split puts 128 / 64 = 2 layers on every rank, so rank 0 is a
// uniform 2-layer stage plus the embedding: per layer 12 h^2 / t
// TP-sharded weights and 2 h of norms, the embedding V h / t; 18 bytes of
// mixed-precision Adam per parameter (dp 1: nothing to shard); 34 s h / t
// of selective-recompute activations per layer (the paper's Table 2, TP +
// SP) times 1F1B's 64 in-flight micro-batches on rank 0; 2 GB reserve.
TEST(PlannerTest, MegatronSplitOfThe1TGptHasTwoLayersOnTheFirstRank) {
  const double h = 25600, V = 51200, s = 2048, t = 8;
  const double params = 2 * (12 * h * h / t + 2 * h) + V * h / t;
  const double activations = 64 * 2 * 34 * s * h / t;
  PlanRequest r = Gpt1T(LayerSplitKind::kMegatron);
  auto e = PlanFixed(r, CountParams(r.model));
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(LayerCounts(e->split), std::vector<int>(64, 2));
  EXPECT_EQ(e->memory.actor.rank, 0);
  EXPECT_DOUBLE_EQ(e->memory.actor.weights.value(), 2 * params);
  EXPECT_DOUBLE_EQ(e->memory.actor.activations.value(), activations);
  EXPECT_DOUBLE_EQ(e->memory.actor.total().value(), 18 * params + activations + 2e9);
}

// torchtitan's even split of the same model gives rank 1 three layers with
// 63 micro-batches in flight: 63 x 3 / (64 x 2) = 1.48 times the megatron
// split's worst activations.
TEST(PlannerTest, EvenSplitOfThe1TGptOverloadsRankOne) {
  PlanRequest r = Gpt1T(LayerSplitKind::kEven);
  const ParamCount pc = CountParams(r.model);
  auto even = PlanFixed(r, pc);
  auto megatron = PlanFixed(Gpt1T(LayerSplitKind::kMegatron), pc);
  ASSERT_TRUE(even.ok() && megatron.ok());
  EXPECT_EQ(even->split.stages[1].layer_count(), 3);
  EXPECT_EQ(even->memory.actor.rank, 1);
  EXPECT_DOUBLE_EQ(even->memory.actor.activations.value() / megatron->memory.actor.activations.value(),
                   63.0 * 3 / (64 * 2));
  // auto evaluates both and keeps the faster: the megatron split's worst
  // stage has two layers, the even split's three.
  auto best = PlanFixed(Gpt1T(LayerSplitKind::kAuto), pc);
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(best->layer_split.kind, LayerSplitKind::kMegatron);
  EXPECT_EQ(best->step.total, megatron->step.total);
}

TEST(PlannerTest, ASplitThatDoesNotFitTheLayoutNamesLayerSplit) {
  PlanRequest r = Gpt1T(LayerSplitKind::kMegatron);
  r.model.layers = 127;
  r.model.attention.assign(127, AttentionKind::kMha);
  EXPECT_EQ(PlanFixed(r, CountParams(r.model)).status().message(),
            "--layer-split: Megatron-LM puts num_layers / pp on every rank, and pp 64 does not divide the 127 layers");
  r = Gpt1T(LayerSplitKind::kExplicit);
  r.layer_split.counts.assign(63, 2);
  auto e = PlanFixed(r, CountParams(r.model));
  EXPECT_EQ(e.status().ExitCode(), 2);
  EXPECT_EQ(e.status().message(), "--layer-split: 63 counts, the plan has 64 stages (pp 64 x 1 per rank)");
}

TEST(PlannerTest, TheLayerSplitRoundTripsThroughTheRecord) {
  PlanRequest r = Gpt1T(LayerSplitKind::kExplicit);
  r.layer_split.counts.assign(64, 2);
  r.layer_split.counts[0] = 1;
  r.layer_split.counts[63] = 3;
  auto back = RequestFromJson(RequestToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->layer_split, r.layer_split);
  // A record from before --layer-split planned with the even split.
  nlohmann::json old = RequestToJson(r);
  old.erase("layer_split");
  EXPECT_EQ(RequestFromJson(old)->layer_split.kind, LayerSplitKind::kEven);
}

// zb-h2 is priced as its authors run it, with the optimizer step's
// synchronisation bypassed (post-validation), unless the request says sync;
// the choice survives the plan's record.
TEST(PlannerTest, ZbH2StepFollowsTheOptimizerSync) {
  PlanRequest r = testing::SeedRequest("kimi-k3-debug", "h100", 1);
  r.plan = ParallelPlan{2, 2, 1, 2, 1, 1, 2, 1, 1, 1};
  r.schedule = ScheduleKind::kZbH2;
  const ParamCount pc = CountParams(r.model);
  auto post = PlanFixed(r, pc);
  ASSERT_TRUE(post.ok()) << post.status().message();
  const StepTime& s = post->step;
  EXPECT_EQ(r.step_sync(), OptimizerSync::kPostValidation);
  EXPECT_EQ(s.bubble, BubbleTime(ScheduleKind::kZbH2, 2, 1, s.f, s.b, s.w, OptimizerSync::kPostValidation));
  r.optimizer_sync = OptimizerSync::kSynchronised;
  auto sync = PlanFixed(r, pc);
  ASSERT_TRUE(sync.ok());
  EXPECT_EQ(sync->step.bubble, BubbleTime(ScheduleKind::kZbH2, 2, 1, s.f, s.b, s.w));
  EXPECT_NEAR((sync->step.total - s.total).value(), (sync->step.bubble - s.bubble).value(), 1e-12);
  auto back = RequestFromJson(RequestToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->optimizer_sync, OptimizerSync::kSynchronised);
}

}  // namespace
}  // namespace kp
