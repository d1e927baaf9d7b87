// The pipeline composed with data and expert parallelism, and the pipeline's
// gradients over real processes.
//
// In-process ranks (threads): pp 2 x dp 2, step 1 bitwise and several steps
// identical to the single-process reference that accumulates each replica's
// micro-batches apart and averages the replicas in DP-rank order; pp 2 x
// dp 2 x ep 2 against the same micro-batches run without a pipeline, the
// experts sharded over EP (EpReference); pp 2 x (dp 1, 2) x tp 2, with and
// without sequence parallelism, against the reference to fp32 rounding.
//
// Gloo processes: PipelineProcess.X spawns pp x dp copies of this binary,
// each running PipelineProcessRank.Step1 for the shape named in
// KIMI_PLAN_TEST_PIPELINE: it meets its peers over c10d Gloo (FileStore on
// 127.0.0.1), runs step 1 and compares every gradient of its stages, the
// loss and the norm with the reference it computes itself.
#include <gtest/gtest.h>

#include <cstdlib>

#include "runtime/comm/dist_test_util.h"
#include "runtime/train/train_session.h"
#include "runtime/train/pipeline_test_util.h"

namespace kp::runtime {
namespace {

using testing::Config;
using testing::DebugSpec;
using testing::EpReference;
using testing::ExpectSameGrads;
using testing::Pipeline;
using testing::Reference;
using testing::RunResult;

constexpr int kSteps = 4;

TEST(PipelineDpTest, Pp2Dp2BitwiseAndIdenticalSteps) {
  for (bool cache : {false, true}) {
    const PipelineRankConfig c = Config(DebugSpec(8), ScheduleKind::k1F1B, 2, 1, cache, /*dp=*/2);
    const RunResult ref = Reference(c, kSteps, 2);
    auto got = Pipeline(c, kSteps, {}, {.dp = 2});
    ASSERT_TRUE(got.ok()) << got.status().message();
    const std::string what = cache ? "pp2 x dp2 cached" : "pp2 x dp2 naive";
    ExpectSameGrads(ref.grads, got->grads, 0, what);
    for (const PipelineStepResult& r : got->step1) {  // every rank reports the global values
      EXPECT_EQ(r.loss, ref.losses[0]) << what;
      EXPECT_EQ(r.grad_norm, ref.norms[0]) << what;
    }
    for (int step = 0; step < kSteps; ++step) {
      EXPECT_EQ(ref.losses[step], got->losses[step]) << what << " step " << step + 1;
      EXPECT_EQ(ref.norms[step], got->norms[step]) << what << " step " << step + 1;
    }
  }
}

// Interleaved stages on each replica: two stages per rank, cache off.
TEST(PipelineDpTest, Pp2Vp2Dp2Bitwise) {
  const PipelineRankConfig c = Config(DebugSpec(8), ScheduleKind::kInterleaved1F1B, 2, 2, false, 2);
  const RunResult ref = Reference(c, 2, 2);
  auto got = Pipeline(c, 2, {}, {.dp = 2});
  ASSERT_TRUE(got.ok()) << got.status().message();
  ExpectSameGrads(ref.grads, got->grads, 0, "pp2 x vp2 x dp2");
  EXPECT_EQ(ref.losses, got->losses);
  EXPECT_EQ(ref.norms, got->norms);
}

// EP inside the stages: each stage's 4 experts split 2 + 2 over the stage's
// two replicas. Clipping off (see EpReference); the norm, a sum over shards,
// agrees to fp64 rounding.
TEST(PipelineDpTest, Pp2Dp2Ep2EqualsExpertParallelWithoutPipeline) {
  PipelineRankConfig c = Config(DebugSpec(8), ScheduleKind::k1F1B, 2, 1, false, 2);
  c.train.grad_clip = 1e9;
  auto ref = EpReference(c, kSteps, {.dp = 2, .ep = 2});
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  auto got = Pipeline(c, kSteps, {}, {.dp = 2, .ep = 2});
  ASSERT_TRUE(got.ok()) << got.status().message();
  ExpectSameGrads(ref->grads, got->grads, 0, "pp2 x dp2 x ep2");
  EXPECT_EQ(ref->losses, got->losses);
  // The whole model's norm: the single-process reference's, to rounding.
  const RunResult dense = Reference(c, 1, 2);
  const double bound = testing::ReorderedSumBound(c);
  EXPECT_NEAR(got->norms[0], dense.norms[0], bound * dense.norms[0]);
  EXPECT_NEAR(got->losses[0], dense.losses[0], bound * dense.losses[0]);
}

// Every rank's step-1 loss and norm are the reference's (each rank reports
// the global values) within `bound`, and rank 0's loss at step s within
// s x bound: each step's update adds at most its own step's rounding to the
// parameters' difference. All relative.
void ExpectLossesAndNormsMatch(const RunResult& ref, const RunResult& got, double bound, const std::string& what) {
  for (const PipelineStepResult& r : got.step1) {
    EXPECT_NEAR(r.loss, ref.losses[0], bound * ref.losses[0]) << what;
    EXPECT_NEAR(r.grad_norm, ref.norms[0], bound * ref.norms[0]) << what;
  }
  for (int step = 0; step < kSteps; ++step)
    EXPECT_NEAR(got.losses[step], ref.losses[step], (step + 1) * bound * ref.losses[step]) << what << " step " << step + 1;
}

// TP inside the stages (issue 16), with and without sequence parallelism:
// pp 2 x tp 2, and pp 2 x dp 2 x tp 2 (8 ranks), against the single-process
// reference: the TP all-reduces add partial sums in another order than one
// GEMM does, so fp32 rounding apart (a shard against its slice of the whole).
TEST(PipelineDpTest, TensorParallelStagesEqualOneProcessWithAndWithoutSp) {
  struct Shape {
    int dp;
    bool sp;
  };
  for (const Shape& shape : {Shape{1, false}, Shape{1, true}, Shape{2, true}}) {
    const PipelineRankConfig c = Config(DebugSpec(8), ScheduleKind::k1F1B, 2, 1, true, shape.dp);
    const RunResult ref = Reference(c, kSteps, shape.dp);
    auto got = Pipeline(c, kSteps, {}, {.dp = shape.dp, .tp = 2, .sequence_parallel = shape.sp});
    const std::string what = "pp2 x dp" + std::to_string(shape.dp) + " x tp2" + (shape.sp ? " with SP" : "");
    ASSERT_TRUE(got.ok()) << what << ": " << got.status().message();
    const double bound = testing::ReorderedSumBound(c);
    ExpectSameGrads(testing::AsTensorParallel(ref.grads, got->grads, shape.dp, 2), got->grads, bound, what);
    ExpectLossesAndNormsMatch(ref, *got, bound, what);
  }
}

// ETP inside the stages (issue 16): each expert's FFN split over 2 ranks,
// alone (pp 2 x dp 2, etp 2) and with EP (pp 2 x dp 4, ep 2 x etp 2: 8
// ranks), against the single-process reference; an ETP shard's gradient
// against its slice of the whole. The FFN's partial sums add in another
// order than one GEMM, so fp32 rounding apart; clipping is active.
TEST(PipelineDpTest, ExpertTensorParallelStagesEqualOneProcess) {
  for (const testing::Parallel& p : {testing::Parallel{.dp = 2, .etp = 2}, testing::Parallel{.dp = 4, .ep = 2, .etp = 2}}) {
    const PipelineRankConfig c = Config(DebugSpec(8), ScheduleKind::k1F1B, 2, 1, false, p.dp);
    const RunResult ref = Reference(c, kSteps, p.dp);
    auto got = Pipeline(c, kSteps, {}, p);
    const std::string what = "pp2 x dp" + std::to_string(p.dp) + " ep" + std::to_string(p.ep) + " x etp2";
    ASSERT_TRUE(got.ok()) << what << ": " << got.status().message();
    const double bound = testing::ReorderedSumBound(c);
    ExpectSameGrads(testing::AsExpertShards(ref.grads, got->grads, p.dp, p.ep, p.etp), got->grads, bound, what);
    ExpectLossesAndNormsMatch(ref, *got, bound, what);
  }
}

// CP inside the stages (issue 16): each sequence of 16 split into 2 x cp
// chunks over the CP ranks (KDA's state and halos passed along, MLA's keys
// gathered), alone (pp 2 x cp 2), with DP (pp 2 x dp 2 x cp 2: 8 ranks), with
// ETP (pp 2 x cp 2 x etp 2: experts split over the CP ranks) and with TP and
// SP (pp 2 x cp 2 x tp 2), against the single-process reference: the sums
// over tokens split and KDA's chunks cut at the CP chunks' edges, so fp32
// rounding apart (in fp64 the mixers agree to 1e-12: context_parallel_test.cc);
// clipping is active.
TEST(PipelineDpTest, ContextParallelStagesEqualOneProcess) {
  for (const testing::Parallel& p :
       {testing::Parallel{.cp = 2}, testing::Parallel{.dp = 2, .cp = 2}, testing::Parallel{.etp = 2, .cp = 2},
        testing::Parallel{.tp = 2, .sequence_parallel = true, .cp = 2}}) {
    PipelineRankConfig c = Config(DebugSpec(8), ScheduleKind::k1F1B, 2, 1, false, p.dp);
    c.train.seq_len = 16;  // chunks of 4: KDA's convolution reaches 3 back
    const RunResult ref = Reference(c, kSteps, p.dp);
    auto got = Pipeline(c, kSteps, {}, p);
    const std::string what = "pp2 x dp" + std::to_string(p.dp) + " x cp2 x tp" + std::to_string(p.tp) + " etp" +
                             std::to_string(p.etp);
    ASSERT_TRUE(got.ok()) << what << ": " << got.status().message();
    for (int k = 0; k < p.cp; ++k) {
      const testing::Grads mine = testing::OfContextRank(got->grads, k);
      const testing::Grads want = p.tp > 1 ? testing::AsTensorParallel(ref.grads, mine, p.dp, p.tp)
                                           : testing::AsExpertShards(ref.grads, mine, p.dp, p.ep, p.etp, p.cp, k);
      ExpectSameGrads(want, mine, testing::ReorderedSumBound(c), what + " cp rank " + std::to_string(k));
    }
    ExpectLossesAndNormsMatch(ref, *got, testing::ReorderedSumBound(c), what);
  }
}

// TP with EP (Megatron's MoE folding; SP on): a stage's tp x dp ranks hold
// the experts split in blocks of ep, here the TP pair (pp 2 x tp 2 x ep 2)
// and with DP (pp 2 x dp 2 x tp 2 x ep 2: 8 ranks); each TP rank routes its
// own sequence shard, and the experts' gradients are summed over expert-DP,
// not over TP. Against the single-process reference: an expert shard (EP
// rank = TP rank here) against its slice of the whole.
TEST(PipelineDpTest, TensorParallelWithExpertParallelEqualsOneProcess) {
  for (int dp : {1, 2}) {
    const PipelineRankConfig c = Config(DebugSpec(8), ScheduleKind::k1F1B, 2, 1, false, dp);
    const RunResult ref = Reference(c, kSteps, dp);
    auto got = Pipeline(c, kSteps, {}, {.dp = dp, .ep = 2, .tp = 2, .sequence_parallel = true});
    const std::string what = "pp2 x dp" + std::to_string(dp) + " x tp2 x ep2";
    ASSERT_TRUE(got.ok()) << what << ": " << got.status().message();
    const double bound = testing::ReorderedSumBound(c);
    ExpectSameGrads(testing::AsTensorParallel(ref.grads, got->grads, dp, 2), got->grads, bound, what);
    ExpectLossesAndNormsMatch(ref, *got, bound, what);
  }
}

TEST(PipelineDpTest, BatchThatDoesNotSplitOverReplicasIsRefused) {
  PipelineRankConfig c = Config(DebugSpec(8), ScheduleKind::k1F1B, 2, 1, false, 2);
  c.microbatches = 3;  // 4 rows per replica
  auto got = Pipeline(c, 1, {}, {.dp = 2});
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("--microbatches: 3 must be positive and divide the 4 sequences of a replica"),
            std::string::npos)
      << got.status().message();
}

// ---------------------------------------------------------------- Gloo processes

struct ProcessShape {
  const char* name;
  ScheduleKind kind;
  int pp, vp, dp, ep, layers;
  const char* split;  // "" = the even split
  bool cache;
};

const ProcessShape kProcessShapes[] = {
    {"pp2", ScheduleKind::k1F1B, 2, 1, 1, 1, 8, "", false},
    {"pp4", ScheduleKind::k1F1B, 4, 1, 1, 1, 8, "", false},
    {"pp2xvp2", ScheduleKind::kInterleaved1F1B, 2, 2, 1, 1, 8, "", false},
    {"pp4xvp4", ScheduleKind::kInterleaved1F1B, 4, 4, 1, 1, 17, "1,2,2,1,1,1,1,1,1,1,1,1,1,1,1,0", false},
    {"pp2-cached", ScheduleKind::k1F1B, 2, 1, 1, 1, 8, "", true},
    {"pp4-cached", ScheduleKind::k1F1B, 4, 1, 1, 1, 8, "", true},
    {"pp2xdp2", ScheduleKind::k1F1B, 2, 1, 2, 1, 8, "", false},
    {"pp2xdp2xep2", ScheduleKind::k1F1B, 2, 1, 2, 2, 8, "", false},
};

constexpr const char* kShapeVariable = "KIMI_PLAN_TEST_PIPELINE";

const ProcessShape* FindShape(const std::string& name) {
  for (const ProcessShape& s : kProcessShapes)
    if (name == s.name) return &s;
  return nullptr;
}

PipelineRankConfig ShapeConfig(const ProcessShape& shape) {
  const ModelSpec spec = DebugSpec(shape.layers);
  PipelineRankConfig c = Config(spec, shape.kind, shape.pp, shape.vp, shape.cache, shape.dp);
  if (*shape.split) {
    auto split = ParseSplit(shape.split, spec.layers);
    EXPECT_TRUE(split.ok()) << split.status().message();
    if (split.ok()) c.split = *split;
  }
  if (shape.ep > 1) c.train.grad_clip = 1e9;  // see EpReference
  return c;
}

TEST(PipelineProcessRank, Step1) {
  if (!testing::IsRankProcess() || std::getenv(kShapeVariable) == nullptr)
    GTEST_SKIP() << "a rank of PipelineProcess.*";
  const ProcessShape* shape = FindShape(std::getenv(kShapeVariable));
  ASSERT_NE(shape, nullptr) << std::getenv(kShapeVariable);
  at::set_num_threads(1);  // the reference and the rank alike; the ranks share the cores
  std::unique_ptr<Communicator> world = testing::ConnectThisRank();
  ASSERT_NE(world, nullptr);
  const PipelineRankConfig c = ShapeConfig(*shape);
  RunResult got;
  std::mutex mu;
  const Status s = testing::ComposedRank(*world, c, {.dp = shape->dp, .ep = shape->ep}, 1, {}, got, mu);
  ASSERT_TRUE(s.ok()) << s.message();
  RunResult ref;
  if (shape->ep > 1) {
    auto r = EpReference(c, 1, {.dp = shape->dp, .ep = shape->ep});
    ASSERT_TRUE(r.ok()) << r.status().message();
    ref = *r;
  } else {
    ref = Reference(c, 1, shape->dp);
  }
  const std::string what = std::string(shape->name) + " rank " + std::to_string(world->rank());
  ASSERT_EQ(got.step1.size(), 1u);
  EXPECT_FALSE(got.grads.empty()) << what;
  ExpectSameGrads(ref.grads, got.grads, 0, what, /*only_got=*/true);
  EXPECT_EQ(got.step1[0].loss, ref.losses[0]) << what;
  if (shape->ep == 1) {
    EXPECT_EQ(got.step1[0].grad_norm, ref.norms[0]) << what;
  }
}

void RunShapes(const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    const ProcessShape* shape = FindShape(name);
    ASSERT_NE(shape, nullptr) << name;
    const int world = shape->pp * shape->dp;
    EXPECT_EQ(testing::RunRanks("PipelineProcessRank.Step1", world, {std::string(kShapeVariable) + "=" + name}),
              std::vector<int>(world, 0))
        << name << ": a rank failed (its output above names the gradient)";
  }
}

TEST(PipelineProcess, Step1GradientsBitwiseOverGlooCacheOff) {
  if (testing::IsRankProcess()) GTEST_SKIP();
  RunShapes({"pp2", "pp4", "pp2xvp2", "pp4xvp4"});
}

TEST(PipelineProcess, Step1GradientsBitwiseOverGlooCacheOn) {
  if (testing::IsRankProcess()) GTEST_SKIP();
  RunShapes({"pp2-cached", "pp4-cached"});
}

TEST(PipelineProcess, Step1ComposedWithDataAndExpertParallelOverGloo) {
  if (testing::IsRankProcess()) GTEST_SKIP();
  RunShapes({"pp2xdp2", "pp2xdp2xep2"});
}

// What --max-params checks, against counts made independently: the
// pipeline ranks together hold the whole model, and EP x ETP divides
// exactly the routed experts' banks.
TEST(ShardedConstructionTest, ParametersPerPipelineRankAddUpToTheModel) {
  TrainConfig c;
  c.model = DebugSpec(5);
  c.seq_len = 8;
  auto whole = BuildModel(c.model, ModelOptions{});
  ASSERT_TRUE(whole.ok());
  const std::int64_t total = CountElements((*whole)->parameters());
  ParallelLayout pp3;
  pp3.pp = 3;
  auto counts = ParametersPerPipelineRank(pp3, c);
  ASSERT_TRUE(counts.ok()) << counts.status().message();
  ASSERT_EQ(counts->size(), 3u);
  EXPECT_EQ((*counts)[0] + (*counts)[1] + (*counts)[2], total);
  for (std::int64_t n : *counts) EXPECT_GT(n, 0);

  ParallelLayout ep;
  ep.dp = 4, ep.ep = 2, ep.etp = 2;
  counts = ParametersPerPipelineRank(ep, c);
  ASSERT_TRUE(counts.ok()) << counts.status().message();
  std::int64_t experts = 0;
  for (const auto& p : (*whole)->named_parameters())
    if (p.key().find(".moe.experts.") != std::string::npos) experts += p.value().numel();
  ASSERT_GT(experts, 0);
  EXPECT_EQ(counts->at(0), total - experts + experts / 4);
}

}  // namespace
}  // namespace kp::runtime
