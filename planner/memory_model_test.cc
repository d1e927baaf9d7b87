#include "planner/memory_model.h"

#include <gtest/gtest.h>

#include "planner/test_util.h"

namespace kp {
namespace {

using testing::Gpt;
using testing::Model;

// Korthikanti et al., "Reducing Activation Recomputation in Large
// Transformer Models" (2022), Table 2, per layer, 16-bit activations.
class KorthikantiTest : public ::testing::Test {
 protected:
  static constexpr double s = 2048, b = 1, h = 4096, a = 32, t = 8;
  ModelSpec m = Gpt(2, 4096, 32, 51200);
  Bytes Layer(int tp, bool sp, Recompute r) {
    ParallelPlan p;
    p.tp = tp;
    return LayerActivationBytes(m, 0, s, b, p, sp, r, /*flash=*/false, 1.0);
  }
};

TEST_F(KorthikantiTest, NoParallelism) {
  EXPECT_DOUBLE_EQ(Layer(1, false, Recompute::kNone).value(), s * b * h * (34 + 5 * a * s / h));
}

TEST_F(KorthikantiTest, TensorParallel) {
  EXPECT_DOUBLE_EQ(Layer(8, false, Recompute::kNone).value(), s * b * h * (10 + 24 / t + 5 * a * s / (h * t)));
}

TEST_F(KorthikantiTest, TensorAndSequenceParallel) {
  EXPECT_DOUBLE_EQ(Layer(8, true, Recompute::kNone).value(), s * b * h / t * (34 + 5 * a * s / h));
}

TEST_F(KorthikantiTest, SelectiveRecompute) {
  EXPECT_DOUBLE_EQ(Layer(8, true, Recompute::kSelective).value(), 34 * s * b * h / t);
  EXPECT_DOUBLE_EQ(Layer(8, false, Recompute::kSelective).value(), s * b * h * (10 + 24 / t));
}

TEST_F(KorthikantiTest, FullRecompute) {
  EXPECT_DOUBLE_EQ(Layer(8, false, Recompute::kFull).value(), 2 * s * b * h);
  EXPECT_DOUBLE_EQ(Layer(8, true, Recompute::kFull).value(), 2 * s * b * h / t);
}

TEST_F(KorthikantiTest, FlashAttentionDropsTheQuadraticTerm) {
  ParallelPlan p;
  const double flash = LayerActivationBytes(m, 0, s, b, p, false, Recompute::kNone, true, 1.0).value();
  // 34 sbh, plus the fp32 softmax statistics (4 bytes per head per token).
  EXPECT_DOUBLE_EQ(flash, s * b * h * 34 + 4 * a * s * b);
}

// Megatron-LM's full recomputation by method and layer count, on a stage of
// L = 8 GPT layers with TP 8 and SP: a layer keeps sbh/t (34 + 5as/h)
// without recomputation and its input, 2sbh/t, when recomputed.
class RecomputeMethodTest : public ::testing::Test {
 protected:
  static constexpr double s = 2048, b = 1, h = 4096, a = 32, t = 8, L = 8, V = 51200;
  const double full = s * b * h / t * (34 + 5 * a * s / h);
  const double input = 2 * s * b * h / t;
  PlanRequest r;
  StageSplit split{{StageLayers{0, 8, true, true}}};
  void SetUp() override {
    r.model = Gpt(8, 4096, 32, 51200);
    r.gpu = testing::Gpu("h200");
    r.prompt_length = 2048;
    r.response_length = 0;
    r.global_batch = 1;
    r.flash_attention = false;
    r.plan.tp = 8;
    r.recompute = Recompute::kFull;
  }
  void Set(RecomputeMethod m, int n) {
    r.recompute_method = m;
    r.recompute_layers = n;
  }
  double Stage() { return StageActivationBytes(r, r.plan, split.stages[0]).value(); }
  double Working() { return RecomputeWorkingSet(r, r.plan, split, {0}).value(); }
};

TEST_F(RecomputeMethodTest, BlockKeepsTheInputsOfTheFirstNAndEverythingOfTheRest) {
  for (int n : {1, 3, 7}) {
    Set(RecomputeMethod::kBlock, n);
    EXPECT_DOUBLE_EQ(Stage(), n * input + (L - n) * full) << n;
    // One layer recomputed at a time, once the backward has freed the L - n
    // layers kept whole: nothing beyond the chunk.
    EXPECT_DOUBLE_EQ(Working(), 0) << n;
  }
  // N at or beyond the stage's layers recomputes them all: plain full.
  for (int n : {8, 20}) {
    Set(RecomputeMethod::kBlock, n);
    EXPECT_DOUBLE_EQ(Stage(), L * input) << n;
    EXPECT_DOUBLE_EQ(Working(), full) << n;
  }
}

TEST_F(RecomputeMethodTest, UniformKeepsOneInputPerGroupAndRecomputesAGroupAtATime) {
  // groups of 1 (plain full), 2, 3 (3 + 3 + 2), 8 and 20 (one group)
  const std::pair<int, double> groups[] = {{1, 8}, {2, 4}, {3, 3}, {8, 1}, {20, 1}};
  for (const auto& [n, count] : groups) {
    Set(RecomputeMethod::kUniform, n);
    EXPECT_DOUBLE_EQ(Stage(), count * input) << n;
    EXPECT_DOUBLE_EQ(Working(), std::min<double>(n, L) * full) << n;
  }
  // Selective of the attention core alone: nothing (Korthikanti's terms).
  r.recompute = Recompute::kSelective;
  Set(RecomputeMethod::kUniform, 1);
  EXPECT_DOUBLE_EQ(Working(), 0);
  // With the layer norms too: the last layer's redone modules whole, its
  // scores 5as/h x sbh/t and the norm input that only the norm keeps,
  // 2 sbh/t; nothing of the later layers to free (an earlier layer's less
  // what each later layer kept).
  r.recipe.recompute_modules = {RecomputeModule::kCoreAttn, RecomputeModule::kLayernorm};
  EXPECT_DOUBLE_EQ(Working(), s * b * h / t * (5 * a * s / h + 2));
  r.recompute = Recompute::kNone;
  EXPECT_DOUBLE_EQ(Working(), 0);
}

// The actor's activations on one rank without a pipeline: one micro-batch
// in flight, the recompute working set once (none under block: the layers
// kept whole are freed before the first N are recomputed), and the head's
// fp32 logits with their bf16 gradient (s b V / t x 6 bytes).
TEST_F(RecomputeMethodTest, TheActorAddsTheWorkingSetOnceBesideItsChunks) {
  r.nodes = 1;
  r.gpus_per_node = 8;
  const ParamCount pc = CountParams(r.model);
  const double logits = s * b * V / t * 6;
  Set(RecomputeMethod::kBlock, 3);
  EXPECT_DOUBLE_EQ(EstimateMemory(r, r.plan, split, pc).actor.activations.value(), 3 * input + 5 * full + logits);
  Set(RecomputeMethod::kUniform, 4);
  EXPECT_DOUBLE_EQ(EstimateMemory(r, r.plan, split, pc).actor.activations.value(), 2 * input + 4 * full + logits);
}

TEST(MemoryModelTest, ContextParallelSplitsTheSequence) {
  ModelSpec m = Gpt(2, 1024, 16, 1000);
  ParallelPlan p1, p4;
  p4.cp = 4;
  const double one = LayerActivationBytes(m, 0, 4096, 1, p1, false, Recompute::kSelective, true, 1).value();
  const double four = LayerActivationBytes(m, 0, 4096, 1, p4, false, Recompute::kSelective, true, 1).value();
  EXPECT_DOUBLE_EQ(four * 4, one);
}

// Routed experts: each token is copied to top_k experts; the busiest EP rank
// gets `imbalance` times the mean.
TEST(MemoryModelTest, MoeLayerAddsRoutedCopies) {
  ModelSpec m = Model("kimi-k2.6");
  ParallelPlan p;
  p.tp = 1;
  const double s = 1024;
  const double base = LayerActivationBytes(m, 1, s, 1, p, false, Recompute::kSelective, true, 1.0).value();
  const double skewed = LayerActivationBytes(m, 1, s, 1, p, false, Recompute::kSelective, true, 1.5).value();
  const double per_copy = 2 * 2 * 7168 + 2 * 4 * 2048;  // input and output, gate/up/act/product
  EXPECT_DOUBLE_EQ(skewed - base, s * 8 * 0.5 * per_copy);
}

// The PR: at the end of forward the 93-layer model holds stacks of 1..8,
// N(N+1)/2 = 36 [T, D] rows.
TEST(MemoryModelTest, AttnResStackOfTheWholeKimiK3Is36Columns) {
  ModelSpec m = Model("kimi-k3");
  EXPECT_EQ(AttnResStackColumns(m, StageLayers{0, 93, true, true}), 36);
  // 2 blocks x 4 layers (PR example, no PP): 1 + 2 = 3 columns.
  ModelSpec small = Model("kimi-k3-debug");
  small.layers = 8;
  EXPECT_EQ(AttnResStackColumns(small, StageLayers{0, 8, true, true}), 3);
  // A stage holding layers 5-6 receives [e, x4] and opens no block.
  EXPECT_EQ(AttnResStackColumns(small, StageLayers{5, 7, false, false}), 2);
  // Layers 2-4 receive [e] and open block 1 at layer 4: [e] + [e, x4].
  EXPECT_EQ(AttnResStackColumns(small, StageLayers{2, 5, false, false}), 3);
}

// Seed 000: rank-32 LoRA updates of 9.4 GB (shared-outer) and 41.0 GB
// (per-expert) in bf16.
TEST(MemoryModelTest, LoraSizesReproduceTheSeed) {
  ModelSpec m = Model("kimi-k2.6");
  LoraOptions o;
  o.rank = 32;
  o.experts = LoraExperts::kSharedOuter;
  EXPECT_NEAR(2 * LoraParams(m, o) / 1e9, 9.4, 9.4 * 0.02);
  o.experts = LoraExperts::kPerExpert;
  EXPECT_NEAR(2 * LoraParams(m, o) / 1e9, 41.0, 41.0 * 0.02);
}

TEST(MemoryModelTest, LoraOfOneLinearIsRankTimesInPlusOut) {
  ModelSpec m = Gpt(1, 64, 4, 10);
  LoraOptions o;
  o.rank = 2;
  o.routed_experts = false;
  // q, k, v, o: four 64 x 64 projections.
  EXPECT_DOUBLE_EQ(LoraParams(m, o), 4 * 2 * (64 + 64));
  o.dense_ffn = true;
  EXPECT_DOUBLE_EQ(LoraParams(m, o), 4 * 2 * (64 + 64) + 3 * 2 * (64 + 256));
}

// Mixed-precision Adam: 2 bytes of weights, 4 of fp32 gradients and 12 of
// optimizer state per parameter; the distributed optimizer shards the 12.
// A 4-layer GPT on four H100s, dp 4.
PlanRequest GptOnFourGpus() {
  PlanRequest r;
  r.model = Gpt(4, 1024, 16, 32000);
  r.gpu = testing::Gpu("h100");
  r.nodes = 1;
  r.gpus_per_node = 4;
  r.plan.dp = 4;
  return r;
}

TEST(MemoryModelTest, FullFineTuningStatesPerParameter) {
  PlanRequest r = GptOnFourGpus();
  r.distributed_optimizer = false;
  const ParamCount pc = CountParams(r.model);
  auto split = EvenSplit(4, 1);
  ASSERT_TRUE(split.ok());
  MemoryReport m = EstimateMemory(r, r.plan, *split, pc);
  EXPECT_DOUBLE_EQ(m.actor.weights.value(), 2 * pc.total);
  EXPECT_DOUBLE_EQ(m.actor.grads.value(), 4 * pc.total);
  EXPECT_DOUBLE_EQ(m.actor.optimizer.value(), 12 * pc.total);
  r.distributed_optimizer = true;
  m = EstimateMemory(r, r.plan, *split, pc);
  EXPECT_DOUBLE_EQ(m.actor.optimizer.value(), 12 * pc.total / 4);
  // The frozen reference copy holds bf16 weights only.
  EXPECT_DOUBLE_EQ(m.reference.weights.value(), 2 * pc.total);
}

TEST(MemoryModelTest, ExpertsShardOverEpAndTheirOptimizerOverExpertDp) {
  PlanRequest r = testing::SeedRequest("kimi-k2.6", "h200", 16);
  r.plan.tp = 8;
  r.plan.pp = 2;
  r.plan.ep = 8;
  r.plan.dp = 8;
  const ParamCount pc = CountParams(r.model);
  auto split = EvenSplit(61, 2);
  ASSERT_TRUE(split.ok());
  MemoryReport m = EstimateMemory(r, r.plan, *split, pc);
  // Stage 0 holds layers 0-30: one dense layer and 30 MoE layers.
  const double experts = 30 * pc.layers[1].routed_experts / 8;
  double dense = pc.embedding / 8;
  for (int l = 0; l <= 30; ++l) {
    const LayerParams& lp = pc.layers[l];
    dense += (lp.attention - lp.attention_replicated + lp.dense_ffn + lp.shared_experts) / 8 +
             lp.attention_replicated + lp.latent_proj + lp.router + lp.norms;
  }
  EXPECT_EQ(m.actor.rank, 0);
  EXPECT_NEAR(m.actor.weights.value(), 2 * (dense + experts), 1);
  // edp = tp x dp / ep = 8: the expert optimizer is sharded 8 ways, dense dp x cp = 8 ways.
  EXPECT_NEAR(m.actor.optimizer.value(), 12 * (dense + experts) / 8, 1);
}

TEST(MemoryModelTest, RolloutKvOfMlaIsTheLatentPerToken) {
  PlanRequest r = testing::SeedRequest("kimi-k2.6", "h200", 2);
  r.prompt_length = 2048;
  r.response_length = 2048;
  r.plan.rollout_tp = 8;
  r.plan.rollout_ep = 8;
  const ParamCount pc = CountParams(r.model);
  auto split = EvenSplit(61, 1);
  MemoryReport m = EstimateMemory(r, r.plan, *split, pc);
  EXPECT_DOUBLE_EQ(m.rollout_kv_per_sequence.value(), 61.0 * 4096 * 2 * (512 + 64));
  // INT4 experts with one bf16 scale per 32 weights, everything else bf16.
  const double expected = 2 * (pc.total - pc.sum.routed_experts) / 8 + (0.5 + 2.0 / 32) * pc.sum.routed_experts / 8;
  EXPECT_DOUBLE_EQ(m.rollout.weights.value(), expected);
}

TEST(MemoryModelTest, KdaStateIsFixedPerSequence) {
  PlanRequest r = testing::SeedRequest("kimi-k3", "b200", 1);
  r.plan.rollout_tp = 8;
  r.plan.rollout_ep = 8;
  const ParamCount pc = CountParams(r.model);
  auto split = EvenSplit(93, 1);
  r.prompt_length = 1000;
  r.response_length = 0;
  const double short_kv = EstimateMemory(r, r.plan, *split, pc).rollout_kv_per_sequence.value();
  r.prompt_length = 2000;
  const double long_kv = EstimateMemory(r, r.plan, *split, pc).rollout_kv_per_sequence.value();
  // Only the 24 MLA layers grow with length.
  EXPECT_DOUBLE_EQ(long_kv - short_kv, 24.0 * 1000 * 2 * (512 + 64));
}

TEST(MemoryModelTest, Fp32StatesAreTheRuntimesSixteenBytesPerParameter) {
  PlanRequest r = GptOnFourGpus();
  r.state_precision = StatePrecision::kFp32;
  const ParamCount pc = CountParams(r.model);
  auto split = EvenSplit(4, 1);
  ASSERT_TRUE(split.ok());
  r.distributed_optimizer = false;
  MemoryReport m = EstimateMemory(r, r.plan, *split, pc);
  // fp32 weights (the masters), fp32 gradients, AdamW's two fp32 moments.
  EXPECT_DOUBLE_EQ(m.actor.weights.value(), 4 * pc.total);
  EXPECT_DOUBLE_EQ(m.actor.grads.value(), 4 * pc.total);
  EXPECT_DOUBLE_EQ(m.actor.optimizer.value(), 8 * pc.total);
  r.distributed_optimizer = true;
  m = EstimateMemory(r, r.plan, *split, pc);
  EXPECT_DOUBLE_EQ(m.actor.optimizer.value(), 8 * pc.total / 4);
}

TEST(MemoryModelTest, GradientBucketRaisesThePeakOnlyBeyondTheActivations) {
  PlanRequest r = GptOnFourGpus();
  r.prompt_length = 8;
  r.response_length = 0;
  r.global_batch = 4;
  r.distributed_optimizer = false;  // the replicas' gradients all-reduced in buckets
  const ParamCount pc = CountParams(r.model);
  auto split = EvenSplit(4, 1);
  ASSERT_TRUE(split.ok());
  const MemoryReport none = EstimateMemory(r, r.plan, *split, pc);
  r.gradient_bucket = Bytes(25.0 * (1 << 20));
  const MemoryReport bucket = EstimateMemory(r, r.plan, *split, pc);
  ASSERT_LT(none.actor.activations, r.gradient_bucket);
  EXPECT_DOUBLE_EQ((bucket.actor.other - none.actor.other).value(),
                   (r.gradient_bucket - none.actor.activations).value());
  // The distributed optimizer's reduce-scatter sums in place: no bucket.
  r.distributed_optimizer = true;
  EXPECT_EQ(EstimateMemory(r, r.plan, *split, pc).actor.other, none.actor.other);
  r.distributed_optimizer = false;
  // Without a reduction (one rank) there is no bucket.
  r.plan.dp = 1;
  r.gpus_per_node = 1;
  EXPECT_EQ(EstimateMemory(r, r.plan, *split, pc).actor.other, none.actor.other);
}

// kimi-k3-debug on one H200, one 16-token sequence a step.
PlanRequest DebugModelOneSequence() {
  PlanRequest r = testing::SeedRequest("kimi-k3-debug", "h200", 1);
  r.prompt_length = 16;
  r.response_length = 0;
  r.global_batch = 1;
  r.rollout_n = 1;
  return r;
}

TEST(MemoryModelTest, ActivationProfileScalesByTheMegatronTermsOfThePlan) {
  PlanRequest r = DebugModelOneSequence();
  r.recompute = Recompute::kNone;
  r.state_precision = StatePrecision::kFp32;  // fp32 weights: a bf16 run's copies of them are the fixed part
  auto profile = std::make_shared<ActivationProfile>();
  profile->dtype = "fp32";
  profile->layers.assign(r.model.layers, 0.0);
  profile->layers_fixed.assign(r.model.layers, 0.0);
  profile->layers[3] = 1000;        // an MLA + MoE layer, bytes per token
  profile->layers_fixed[3] = 5000;  // and per micro-batch
  r.activation_profile = profile;
  const int tokens = 16;
  // One rank: the measured bytes themselves.
  ParallelPlan one;
  EXPECT_DOUBLE_EQ(LayerActivationBytesOf(r, one, 3).value(), 1000.0 * tokens + 5000);
  // TP 2 with SP and EP 2: the per-token part shrunk as the layer's
  // Megatron-LM terms shrink, the fixed part as its parameters on a rank.
  ParallelPlan split;
  split.tp = 2;
  split.ep = 2;
  const double shrink = LayerActivationBytes(r.model, 3, tokens, 1, split, true, Recompute::kNone, true, 1.2) /
                        LayerActivationBytes(r.model, 3, tokens, 1, one, false, Recompute::kNone, true, 1.2);
  const LayerParams lp = CountParams(r.model).layers[3];
  const double on_rank = (lp.attention - lp.attention_replicated + lp.shared_experts) / 2 + lp.attention_replicated +
                         lp.latent_proj + lp.router + lp.norms + lp.routed_experts / 2;
  EXPECT_NEAR(LayerActivationBytesOf(r, split, 3).value(), 1000.0 * tokens * shrink + 5000 * on_rank / lp.total(),
              1e-9);
  EXPECT_LT(shrink, 0.6);
  EXPECT_LT(on_rank / lp.total(), 0.6);
  // Weights kept in bf16 (Megatron's mixed states, a LoRA base) are not
  // copied: the per-token part alone.
  r.state_precision = StatePrecision::kMixed;
  EXPECT_DOUBLE_EQ(LayerActivationBytesOf(r, one, 3).value(), 1000.0 * tokens);
  r.mode = TrainMode::kLora;
  r.state_precision = StatePrecision::kFp32;
  EXPECT_DOUBLE_EQ(LayerActivationBytesOf(r, one, 3).value(), 1000.0 * tokens);
  r.mode = TrainMode::kFull;
  // Recomputed whole, a layer keeps neither.
  r.recompute = Recompute::kFull;
  EXPECT_LT(LayerActivationBytesOf(r, one, 3).value(), 1000.0 * tokens * 0.2);
}

// Selective recomputation of the MoE block on a profile that measured the
// layers with their channel mixers redone: an MoE layer keeps the measured
// figure (shrunk as the selective terms shrink under TP), a dense layer
// (its MLP not recomputed under moe alone) the plain one; the backward
// figure is the recomputed pass's, which includes redoing one mixer, so no
// working set is added beside it.
TEST(MemoryModelTest, ProfileMeasuredWithTheMixersRecomputedPricesSelectiveMoe) {
  PlanRequest r = DebugModelOneSequence();
  r.state_precision = StatePrecision::kMixed;
  r.recompute = Recompute::kSelective;
  r.recipe.recompute_modules = {RecomputeModule::kMoe};
  auto profile = std::make_shared<ActivationProfile>();
  profile->dtype = "bf16";
  profile->layers.assign(r.model.layers, 1000.0);
  profile->layers_fixed.assign(r.model.layers, 0.0);
  profile->layers_ffn_recomputed.assign(r.model.layers, 300.0);
  profile->backward = 50;
  profile->backward_ffn_recomputed = 700;
  r.activation_profile = profile;
  const int tokens = 16;
  ASSERT_FALSE(r.model.is_moe_layer(0));
  ASSERT_TRUE(r.model.is_moe_layer(3));
  ParallelPlan one;
  EXPECT_DOUBLE_EQ(LayerActivationBytesOf(r, one, 0).value(), 1000.0 * tokens);
  EXPECT_DOUBLE_EQ(LayerActivationBytesOf(r, one, 3).value(), 300.0 * tokens);
  ParallelPlan tp2;
  tp2.tp = 2;
  r.sequence_parallel = true;
  const double shrink = LayerActivationBytes(r.model, 3, tokens, 1, tp2, true, Recompute::kSelective, true, 1.2,
                                             r.recipe) /
                        LayerActivationBytes(r.model, 3, tokens, 1, one, false, Recompute::kSelective, true, 1.2,
                                             r.recipe);
  EXPECT_NEAR(LayerActivationBytesOf(r, tp2, 3).value(), 300.0 * tokens * shrink, 1e-9);
  // Under mlp as well the dense layer keeps its measured figure too.
  r.recipe.recompute_modules = {RecomputeModule::kMoe, RecomputeModule::kMlp};
  EXPECT_DOUBLE_EQ(LayerActivationBytesOf(r, one, 0).value(), 300.0 * tokens);
  // The whole rank: every layer's kept bytes, the recomputed backward, no
  // recompute working set.
  const StageSplit split{{StageLayers{0, r.model.layers, true, true}}};
  EXPECT_DOUBLE_EQ(RecomputeWorkingSet(r, one, split, {0}).value(), 0);
  const MemoryReport m = EstimateMemory(r, one, split, CountParams(r.model));
  bool backward_named = false;
  for (const auto& [what, bytes] : m.actor.details)
    if (what == "backward working set (measured)") {
      backward_named = true;
      EXPECT_DOUBLE_EQ(bytes.value(), 700.0 * tokens);
    }
  EXPECT_TRUE(backward_named);
}

}  // namespace
}  // namespace kp
