#include "planner/step_time.h"

#include <gtest/gtest.h>

#include "common/file_system.h"
#include "planner/layer_ops.h"
#include "planner/schedule_model.h"
#include "planner/test_util.h"
#include "specs/presets.h"

namespace kp {
namespace {

using testing::Gpt;

// A 4-layer GPT without dropout on one H100: 1024-token sequences, 8 per
// step in micro-batches of 2.
PlanRequest OneGpuGpt() {
  PlanRequest r;
  r.model = Gpt(4, 1024, 16, 32000);
  r.model.dropout = false;
  r.gpu = testing::Gpu("h100");
  r.nodes = 1;
  r.gpus_per_node = 1;
  r.prompt_length = 1024;
  r.response_length = 0;
  r.global_batch = 8;
  r.micro_batch = 2;
  return r;
}

// One GPU, no parallelism: the step is three forwards' FLOPs over the
// achieved peak for every micro-batch, plus the Adam step; no bubble and no
// communication.
TEST(StepTimeTest, SingleGpuDenseModelIsThreeForwardsOverPeak) {
  PlanRequest r = OneGpuGpt();
  const ParamCount pc = CountParams(r.model);
  auto split = EvenSplit(4, 1);
  StepTime t = EstimateStepTime(r, r.plan, *split, pc);
  const double h = 1024, L = 4, V = 32000, s = 1024;
  // Per token forward: 2 x (12 h^2 L + norms) + 2 V h (head) + causal scores a s (2 d) per layer.
  const double fwd = 2 * (pc.sum.attention + pc.sum.dense_ffn + pc.sum.router) + 2 * V * h + L * s * 2 * h;
  const double peak = 989e12 * r.efficiency.matmul;
  EXPECT_EQ(t.microbatches, 4);
  EXPECT_NEAR(t.compute.value(), 3 * fwd * s * 8 / peak, 1e-12);
  EXPECT_EQ(t.bubble.value(), 0);
  EXPECT_EQ(t.tp_comm.value() + t.ep_comm.value() + t.dp_comm.value() + t.pp_comm.value(), 0);
  EXPECT_NEAR(t.optimizer.value(), 30 * pc.total / 3.35e12, 1e-12);
  EXPECT_NEAR(t.total.value(), t.compute.value() + t.optimizer.value(), 1e-12);
  EXPECT_NEAR(t.mfu, ModelTrainFlopsPerToken(r.model, pc, 1024) * s * 8 / (t.total.value() * 989e12), 1e-12);
}

// Full recomputation adds each recomputed layer's forward to its backward:
// block N the first N layers of the stage, uniform (any N) all of them; the
// head's forward is counted again under either method.
TEST(StepTimeTest, RecomputeRedoesTheForwardOfTheRecomputedLayersOnly) {
  PlanRequest r = OneGpuGpt();
  const ParamCount pc = CountParams(r.model);
  auto split = EvenSplit(4, 1);
  auto step = [&](Recompute rc, RecomputeMethod m, int n) {
    PlanRequest q = r;
    q.recompute = rc;
    q.recompute_method = m;
    q.recompute_layers = n;
    return EstimateStepTime(q, q.plan, *split, pc);
  };
  const double h = 1024, V = 32000, s = 1024, M = 4, tokens = 2048;
  const LayerParams& l0 = pc.layers[0];
  const double layer = 2 * (l0.attention + l0.dense_ffn + l0.router) + s * 2 * h;  // forward FLOPs per token
  const double head = 2 * V * h;
  const double peak = 989e12 * r.efficiency.matmul;
  const StepTime none = step(Recompute::kNone, RecomputeMethod::kUniform, 1);
  for (int n : {1, 2, 3}) {
    const StepTime block = step(Recompute::kFull, RecomputeMethod::kBlock, n);
    EXPECT_NEAR(block.compute.value() - none.compute.value(), M * (n * layer + head) * tokens / peak, 1e-12) << n;
    EXPECT_LE(none.total_floor, block.total) << n;
  }
  const StepTime full = step(Recompute::kFull, RecomputeMethod::kUniform, 1);
  EXPECT_NEAR(full.compute.value() - none.compute.value(), M * (4 * layer + head) * tokens / peak, 1e-12);
  EXPECT_EQ(step(Recompute::kFull, RecomputeMethod::kBlock, 4).total, full.total);
  EXPECT_EQ(step(Recompute::kFull, RecomputeMethod::kBlock, 9).total, full.total);
  for (int n : {2, 3, 4, 9}) EXPECT_EQ(step(Recompute::kFull, RecomputeMethod::kUniform, n).total, full.total) << n;
}

TEST(StepTimeTest, TensorParallelAllReducesOverNvlink) {
  PlanRequest r;
  r.model = Gpt(2, 4096, 32, 32000);
  r.gpu = testing::Gpu("h100");
  r.nodes = 1;
  r.gpus_per_node = 8;
  r.prompt_length = 2048;
  r.response_length = 0;
  r.global_batch = 1;
  r.plan.tp = 8;
  const ParamCount pc = CountParams(r.model);
  auto split = EvenSplit(2, 1);
  StepTime t = EstimateStepTime(r, r.plan, *split, pc);
  // Per layer: attention and FFN each all-reduce 2048 x 4096 bf16 forward and
  // backward; a ring all-reduce moves 2 (t-1)/t of it per GPU.
  const double bytes = 2048.0 * 4096 * 2;
  const double per_layer = 4 * 2 * 7.0 / 8 * bytes / (450e9 * 0.8);
  EXPECT_NEAR(t.tp_comm.value(), 2 * per_layer, 1e-12);
}

// `model` on one node of 8 H100s: 8 sequences of 1024 tokens, one per micro-batch.
PlanRequest OneNodeOf(const std::string& model) {
  PlanRequest r = testing::SeedRequest(model, "h100", 1);
  r.prompt_length = 1024;
  r.response_length = 0;
  r.global_batch = 8;
  r.micro_batch = 1;
  return r;
}

// The expert exchanges over NVLink, closed form per MoE layer and micro-batch
// (runtime/model/expert_parallel.h): each rank routes r = tokens x top_k x
// imbalance copies of `in` bf16 values; dispatch and combine, forward and
// backward, are four all-to-alls of them over EP ((ep-1)/ep of the buffer
// leaves each GPU); with ETP the etp ranks' copies are all-gathered and the
// partial outputs reduce-scattered, mirrored in the backward ((etp-1)/etp of
// the gathered etp x r each).
TEST(StepTimeTest, ExpertExchangesAreAllToAllsOverEpAndGatherScatterOverEtp) {
  PlanRequest r = OneNodeOf("kimi-k2.6");
  const ParamCount pc = CountParams(r.model);
  auto split = EvenSplit(r.model.layers, 1);
  const double moe_layers = r.model.layers - r.model.dense_layers;
  const double in = r.model.moe.latent_dim > 0 ? r.model.moe.latent_dim : r.model.hidden;
  const double copies = 1024.0 * r.model.moe.top_k * r.efficiency.moe_imbalance;
  const double link = 450e9 * r.efficiency.comm;
  for (const auto& [ep, etp] : {std::pair{2, 1}, {1, 2}, {2, 2}, {4, 2}}) {
    r.plan = ParallelPlan{};
    r.plan.ep = ep, r.plan.etp = etp, r.plan.dp = 8;
    const StepTime t = EstimateStepTime(r, r.plan, *split, pc);
    const double all_to_all = 4 * (ep - 1.0) / ep * copies * in * 2;
    const double gather_scatter = 2 * 2 * (etp - 1.0) / etp * etp * copies * in * 2;
    const double per_microbatch = moe_layers * (all_to_all + gather_scatter) / link;
    EXPECT_NEAR(t.ep_comm.value(), t.microbatches * per_microbatch, 1e-9 * t.ep_comm.value())
        << "ep " << ep << " etp " << etp;
  }
}

// CP as the native runtime runs it (runtime/model/context_parallel.h): every
// MLA layer all-gathers its latent and rotated key (kv_lora_rank + rope =
// 576 bf16 values a token for K2.6) over the sequence forward and
// reduce-scatters their gradients backward, (cp-1)/cp of the gathered bytes
// each; KDA layers pass their fp32 state one hop per chunk boundary.
TEST(StepTimeTest, ContextParallelGathersMlaLatentsAndPassesKdaStates) {
  PlanRequest r = OneNodeOf("kimi-k2.6");
  const ParamCount pc = CountParams(r.model);
  auto split = EvenSplit(r.model.layers, 1);
  const double link = 450e9 * r.efficiency.comm;
  for (int cp : {2, 4}) {
    r.plan = ParallelPlan{};
    r.plan.cp = cp, r.plan.dp = 8 / cp;
    const StepTime t = EstimateStepTime(r, r.plan, *split, pc);
    const double gathered = 1024.0 * (r.model.mla.kv_lora_rank + r.model.mla.qk_rope_head_dim) * 2;
    const double per_layer = 2 * (cp - 1.0) / cp * gathered / link;
    EXPECT_NEAR(t.cp_comm.value(), t.microbatches * r.model.layers * per_layer, 1e-9 * t.cp_comm.value()) << cp;
  }
  // A KDA layer: 2 (2 cp - 1) hops of the [b, heads, dk, dv] fp32 state.
  PlanRequest k = OneNodeOf("kimi-k3-debug");
  k.plan = ParallelPlan{};
  k.plan.cp = 2, k.plan.dp = 4;
  const ParamCount kpc = CountParams(k.model);
  auto ksplit = EvenSplit(k.model.layers, 1);
  const StepTime t = EstimateStepTime(k, k.plan, *ksplit, kpc);
  double kda = 0, mla = 0;
  for (AttentionKind a : k.model.attention) (a == AttentionKind::kKda ? kda : mla) += 1;
  const double state = 1.0 * k.model.heads * k.model.kda.head_dim_k * k.model.kda.head_dim_v * 4;
  const double latent = 1024.0 * (k.model.mla.kv_lora_rank + k.model.mla.qk_rope_head_dim) * 2;
  EXPECT_NEAR(t.cp_comm.value(), t.microbatches * (kda * 2 * 3 * state + mla * 2 * 0.5 * latent) / link,
              1e-9 * t.cp_comm.value());
}

TEST(StepTimeTest, MoreMicroBatchesShrinkTheBubbleShare) {
  PlanRequest r = testing::SeedRequest("kimi-k2.6", "h200", 16);
  r.plan.tp = 8; r.plan.pp = 4; r.plan.ep = 8; r.plan.dp = 4;
  const ParamCount pc = CountParams(r.model);
  auto split = EvenSplit(61, 4);
  r.global_batch = 16;
  StepTime few = EstimateStepTime(r, r.plan, *split, pc);
  r.global_batch = 256;
  StepTime many = EstimateStepTime(r, r.plan, *split, pc);
  EXPECT_DOUBLE_EQ(few.bubble.value(), many.bubble.value());
  EXPECT_GT(few.bubble / few.total, many.bubble / many.total);
  EXPECT_GT(many.tokens_per_s_per_gpu, few.tokens_per_s_per_gpu);
}

// K2.6 (one dense layer, then MoE) on pp 16: the even split's ranks come in
// few kinds, DistinctRanks keeps one of each, and pricing those alone gives
// the step of pricing every rank, to the bit, under every schedule family,
// recomputation and the overlapped exchange.
TEST(StepTimeTest, DistinctRanksPriceLikeEveryRank) {
  PlanRequest r = testing::SeedRequest("kimi-k2.6", "h200", 32);
  r.plan.tp = 1; r.plan.pp = 16; r.plan.ep = 16; r.plan.dp = 16;
  r.global_batch = 256;
  r.recipe.a2a_overlap = true;
  const ParamCount pc = CountParams(r.model);
  for (ScheduleKind kind : {ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B, ScheduleKind::kZbv}) {
    for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
      SCOPED_TRACE(std::string(ScheduleName(kind)) + " " + RecomputeName(rc));
      r.schedule = kind;
      r.recompute = rc;
      r.plan.vp = kind == ScheduleKind::k1F1B ? 1 : 2;
      auto split = EvenSplit(61, 16 * StagesPerRank(kind, r.plan.vp));
      ASSERT_TRUE(split.ok());
      StageCostCache cache;
      const std::vector<int> ranks = DistinctRanks(r, r.plan, *split, pc, cache);
      EXPECT_EQ(ranks.front(), 0);
      EXPECT_LT(ranks.size(), 8u);  // 61 = 16 x 4 - 3: ranks of 4 MoE layers, of 3, the first with the dense one
      const StepTime all = EstimateStepTime(r, r.plan, *split, pc);
      const StepTime some = EstimateStepTime(r, r.plan, *split, pc, &cache, nullptr, &ranks);
      EXPECT_EQ(some.total, all.total);
      EXPECT_EQ(some.total_floor, all.total_floor);
      EXPECT_EQ(some.bubble, all.bubble);
    }
  }
}

// Splitting an expert over ETP ranks narrows its GEMMs: the routed part of
// a forward slows by the ratio of the two widths' efficiencies.
TEST(StepTimeTest, NarrowExpertSlicesRunBelowPeak) {
  EXPECT_DOUBLE_EQ(GemmWidthEfficiency(2048), 2048.0 / 2176);
  EXPECT_DOUBLE_EQ(GemmWidthEfficiency(256), 256.0 / 384);
  PlanRequest r = testing::SeedRequest("kimi-k2.6", "h200", 1);
  r.global_batch = 8;
  const ParamCount pc = CountParams(r.model);
  auto split = EvenSplit(61, 1);
  ParallelPlan etp1{8, 1, 1, 8, 1, 1, 1, 8, 8, 1}, etp8{8, 1, 1, 1, 8, 1, 1, 8, 8, 1};
  r.plan = etp1;
  const StepTime a = EstimateStepTime(r, etp1, *split, pc);
  r.plan = etp8;
  const StepTime b = EstimateStepTime(r, etp8, *split, pc);
  // Same tokens and FLOPs per GPU (each ETP rank runs every token on 1/8 of
  // each expert; each EP rank runs 1/8 of the tokens on whole experts).
  double routed = 0;
  for (const LayerParams& lp : pc.layers) routed += 2 * lp.routed_expert * 8 * r.efficiency.moe_imbalance;
  const double tokens = 4096.0;
  const double peak = 989e12 * r.efficiency.matmul;
  const double expected = 3 * routed * tokens / 8 / peak * (1 / GemmWidthEfficiency(256) - 1 / GemmWidthEfficiency(2048));
  EXPECT_NEAR((b.f + b.b + b.w - a.f - a.b - a.w).value() - (b.tp_comm + b.ep_comm - a.tp_comm - a.ep_comm).value() / b.microbatches,
              expected, 1e-9);
}

// With a profile's measured times the compute is theirs: per micro-batch the
// pieces' forwards at its tokens plus the whole backward, no separate W.
TEST(StepTimeTest, MeasuredTimesPriceTheNativeCompute) {
  PlanRequest r = OneGpuGpt();  // 4 layers; 4 micro-batches of 2 x 1024 tokens
  auto profile = std::make_shared<ActivationProfile>();
  profile->device = "cuda";
  profile->layers.assign(4, 0.0);
  profile->layers_fixed.assign(4, 0.0);
  PieceTimes times;
  times.embedding = {1e-5, 1e-10};
  times.layers = {{1e-4, 1e-8}, {1e-4, 1e-8}, {2e-4, 2e-8}, {1e-4, 1e-8}};
  times.head = {3e-4, 5e-9};
  times.backward = {2e-3, 3e-8};
  profile->time = times;
  r.activation_profile = profile;
  const ParamCount pc = CountParams(r.model);
  auto split = EvenSplit(4, 1);
  const StepTime t = EstimateStepTime(r, r.plan, *split, pc);
  const double tokens = 2048;
  const double forward = (1e-5 + 1e-10 * tokens) + (3e-4 + 5e-9 * tokens) + 3 * (1e-4 + 1e-8 * tokens) +
                         (2e-4 + 2e-8 * tokens);
  const double backward = 2e-3 + 3e-8 * tokens;
  EXPECT_EQ(t.microbatches, 4);
  EXPECT_NEAR(t.compute.value(), 4 * (forward + backward), 1e-12);
  EXPECT_EQ(PricingOf(r).rfind("measured times of the native runtime", 0), 0u) << PricingOf(r);
}

// With a grouped grid the experts' products are priced from it: a grid of
// twice the bf16 grid's times adds exactly the experts' products once more
// (forward, data and weight gradients, every micro-batch, every MoE layer).
TEST(StepTimeTest, ExpertProductsUseTheGroupedGrid) {
  RealFileSystem fs;
  PresetCatalog catalog(fs, DefaultPresetDir());
  Result<std::shared_ptr<const CalibrationTable>> h200 = catalog.Calibration("h200");
  ASSERT_TRUE(h200.ok()) << h200.status().message();
  CalibrationTable plain = **h200, doubled = **h200;
  plain.gemm.erase(GemmDtype::kBf16Grouped);
  std::vector<GemmPoint> slow = plain.Gemm(GemmDtype::kBf16)->points();
  for (GemmPoint& pt : slow) pt.time = pt.time * 2.0;
  doubled.gemm.erase(GemmDtype::kBf16Grouped);
  doubled.gemm.emplace(GemmDtype::kBf16Grouped, *GemmGrid::Build(slow, "test"));

  PlanRequest r = testing::SeedRequest("kimi-k3-debug", "h200", 1);
  r.gpus_per_node = 1;
  r.prompt_length = 256;
  r.response_length = 0;
  r.global_batch = 2;
  r.micro_batch = 1;
  r.rollout_n = 1;
  r.recompute = Recompute::kNone;
  const ParamCount pc = CountParams(r.model);
  auto split = EvenSplit(r.model.layers, 1);
  r.calibration = std::make_shared<const CalibrationTable>(plain);
  const StepTime base = EstimateStepTime(r, r.plan, *split, pc);
  r.calibration = std::make_shared<const CalibrationTable>(doubled);
  const StepTime slower = EstimateStepTime(r, r.plan, *split, pc);

  const GemmGrid& grid = *plain.Gemm(GemmDtype::kBf16);
  double experts = 0;
  for (int l = 0; l < r.model.layers; ++l)
    for (const GemmOp& g : DecoderLayerOps(r, r.plan, l, r.efficiency.moe_imbalance).gemms)
      if (g.grouped)
        experts += g.count * (grid.Time(g.m, g.n, g.k) + grid.Time(g.m, g.k, g.n) + grid.Time(g.k, g.n, g.m)).value();
  ASSERT_GT(experts, 0);
  EXPECT_NEAR((slower.compute - base.compute).value(), experts * base.microbatches, 1e-9 * base.compute.value());
}

}  // namespace
}  // namespace kp
