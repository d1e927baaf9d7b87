// The pipeline executor (pipeline_runtime.h) against the single-process
// reference that accumulates the same micro-batches, on the in-process
// communicator: bitwise step-1 gradients, 20 identical steps, PR #4312's
// integer-valued block-gradient test, the routing tables' entry counts,
// the deposit-count check, the forward-only pass, the loop-style guard.
#include "runtime/train/pipeline_runtime.h"
#include "runtime/train/schedule_executor.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "runtime/train/pipeline_test_util.h"

namespace kp::runtime {
namespace {

using testing::ClipInPlace;
using testing::Config;
using testing::DebugSpec;
using testing::ExpectSameGrads;
using testing::Pipeline;
using testing::Reference;
using testing::RunResult;
using testing::Tokens;

struct Shape {
  const char* name;
  ScheduleKind kind;
  int pp, vp, layers;
  const char* split;  // "" = the even split
};

// `bitwise`: the same sums in the same order as the reference; otherwise the
// same terms in another association, within ReorderedSumBound.
void CheckStep1(const Shape& shape, bool cache, bool bitwise) {
  const ModelSpec spec = DebugSpec(shape.layers);
  PipelineRankConfig c = Config(spec, shape.kind, shape.pp, shape.vp, cache);
  if (*shape.split) {
    auto split = ParseSplit(shape.split, spec.layers);
    ASSERT_TRUE(split.ok()) << split.status().message();
    c.split = *split;
  }
  const RunResult ref = Reference(c, 1);
  auto got = Pipeline(c, 1);
  ASSERT_TRUE(got.ok()) << got.status().message();
  const std::string what = std::string(shape.name) + (cache ? " cached" : " naive");
  EXPECT_EQ(ref.losses[0], got->losses[0]) << what;  // the forward is bitwise in every cell
  const double tolerance = bitwise ? 0 : testing::ReorderedSumBound(c);
  if (bitwise) {
    EXPECT_EQ(ref.norms[0], got->norms[0]) << what;
  } else {
    EXPECT_NEAR(ref.norms[0], got->norms[0], tolerance * ref.norms[0]) << what;
  }
  ExpectSameGrads(ref.grads, got->grads, tolerance, what);
}

// Cache on with several stages per rank, a stored block's gradient is the
// reference's contributions summed in another association (deposits are
// per-stage partial sums folded at the collecting stage; the reference folds
// layer by layer from the head down), which no collect order can reproduce
// without shipping the partial sums back over the wire, i.e. the naive
// payload. So those cells are held to the bound derived from the operation
// count and fp32's epsilon (ReorderedSumBound; the measured differences
// were 8.1e-6 to 2.6e-5 of the largest gradient), far below a misrouted deposit
// (order 1). The loss is bitwise; the integer-valued test below shows the
// routing itself is exact.

const Shape kPp2{"pp2", ScheduleKind::k1F1B, 2, 1, 8, ""};
const Shape kZbH1{"pp2 zb-h1 (W folded into I)", ScheduleKind::kZbH1, 2, 1, 8, ""};
const Shape kPp4{"pp4", ScheduleKind::k1F1B, 4, 1, 8, ""};
const Shape kPp2Vp2{"pp2 x vp2", ScheduleKind::kInterleaved1F1B, 2, 2, 8, ""};
const Shape kPp4Vp4{"pp4 x vp4", ScheduleKind::kInterleaved1F1B, 4, 4, 17, "1,2,2,1,1,1,1,1,1,1,1,1,1,1,1,0"};

TEST(PipelineRuntimeTest, Step1BitwiseOnePerRank) {
  for (bool cache : {false, true}) {
    CheckStep1(kPp2, cache, /*bitwise=*/true);
    CheckStep1(kPp4, cache, /*bitwise=*/true);
    CheckStep1(kZbH1, cache, /*bitwise=*/true);
  }
}

TEST(PipelineRuntimeTest, Step1BitwiseNaiveInterleaved) {
  CheckStep1(kPp2Vp2, false, /*bitwise=*/true);
  CheckStep1(kPp4Vp4, false, /*bitwise=*/true);
}

TEST(PipelineRuntimeTest, Step1CachedInterleaved) {
  CheckStep1(kPp2Vp2, true, /*bitwise=*/false);
  CheckStep1(kPp4Vp4, true, /*bitwise=*/false);
}

TEST(PipelineRuntimeTest, CacheOffLossesIdenticalForTwentySteps) {
  for (const Shape& shape : {kPp2, kPp2Vp2}) {
    const PipelineRankConfig c = Config(DebugSpec(shape.layers), shape.kind, shape.pp, shape.vp, false);
    const RunResult ref = Reference(c, 20);
    auto got = Pipeline(c, 20);
    ASSERT_TRUE(got.ok()) << got.status().message();
    for (int step = 0; step < 20; ++step) {
      EXPECT_EQ(ref.losses[step], got->losses[step]) << shape.name << " step " << step + 1;
      EXPECT_EQ(ref.norms[step], got->norms[step]) << shape.name << " step " << step + 1;
    }
  }
}

// ---------------------------------------------------------------- integer-valued block gradients

constexpr int kIntBlock = 3;

// Layer l reads block j with weight c(l, j) in {-1, 0, 1}; the head reads
// every block with weight 1 and the loss is sum(q * h), so every gradient
// that reaches the block stack is a small integer (times 1 / M, a power of
// two) whatever the parameters are, and every sum of them is exact in fp32
// and bf16. Any lost, doubled or misrouted contribution changes a gradient.
int Coef(int l, int j) { return ((l + 2 * j) % 3) - 1; }

class IntegerStage : public PipelineStageModule {
 public:
  IntegerStage(const ModelSpec& spec, torch::ScalarType act, const StageLayers& layers)
      : spec_(spec), act_(act), layers_(layers) {
    if (layers.embedding)
      embedding_ = torch::arange(spec.vocab * spec.hidden, torch::kFloat).reshape({spec.vocab, spec.hidden})
                       .remainder(7).div(8).requires_grad_();
    for (int l = layers.first_layer; l < layers.end_layer; ++l)
      biases_.push_back(torch::full({spec.hidden}, 0.25 * (l % 3), torch::kFloat).requires_grad_());
  }

  ResidualStream Embed(const torch::Tensor& tokens) override {
    return {torch::embedding(embedding_, tokens).to(act_), {}};
  }

  ResidualStream RunLayers(ResidualStream in, bool) override {
    for (int l = layers_.first_layer; l < layers_.end_layer; ++l) {
      torch::Tensor h;
      if (l % kIntBlock == 0) in.blocks.push_back(in.hidden);
      else h = in.hidden;
      for (int j = 0; j < static_cast<int>(in.blocks.size()); ++j)
        if (Coef(l, j) != 0) h = h.defined() ? h + in.blocks[j] * double(Coef(l, j)) : in.blocks[j] * double(Coef(l, j));
      in.hidden = (h.defined() ? h : torch::zeros_like(in.hidden)) + biases_[l - layers_.first_layer].to(act_);
    }
    return in;
  }

  torch::Tensor Loss(const ResidualStream& in, const torch::Tensor&) override {
    torch::Tensor h = in.hidden;
    for (const torch::Tensor& b : in.blocks) h = h + b;
    return (h.to(torch::kFloat) * Q(spec_.hidden)).sum();
  }

  std::vector<torch::Tensor> TrainableParameters() override {
    std::vector<torch::Tensor> out;
    if (embedding_.defined()) out.push_back(embedding_);
    for (const torch::Tensor& b : biases_) out.push_back(b);
    return out;
  }

  static torch::Tensor Q(std::int64_t d) { return torch::arange(d, torch::kFloat).remainder(4).sub(1.5).mul(2); }

 private:
  ModelSpec spec_;
  torch::ScalarType act_;
  StageLayers layers_;
  torch::Tensor embedding_;
  std::vector<torch::Tensor> biases_;
};

// The closed form of the stand-in's gradients (they do not depend on the
// parameters): g[k] scales q inside block k; an entry's gradient sums its
// readers' coefficients times their block's g, plus the head's 1.
std::vector<torch::Tensor> ClosedFormGrads(const PipelineRankConfig& c, const std::vector<std::int64_t>& tokens) {
  const ModelSpec& spec = c.train.model;
  const int L = spec.layers, nb = (L + kIntBlock - 1) / kIntBlock;
  std::vector<double> g(nb, 0);
  auto entry = [&](int j) {
    double sum = 1;
    for (int l = j * kIntBlock; l < L; ++l) sum += Coef(l, j) * g[l / kIntBlock];
    return sum;
  };
  g[nb - 1] = 1;
  for (int k = nb - 2; k >= 0; --k) g[k] = entry(k + 1);
  const torch::Tensor q = IntegerStage::Q(spec.hidden).to(torch::kDouble);
  const double positions = double(c.train.batch) * c.train.seq_len;
  torch::Tensor emb = torch::zeros({spec.vocab, spec.hidden}, torch::kDouble);
  for (int b = 0; b < c.train.batch; ++b)
    for (int t = 0; t < c.train.seq_len; ++t) emb[tokens[b * (c.train.seq_len + 1) + t]] += q * entry(0);
  std::vector<torch::Tensor> grads{(emb / c.microbatches).to(torch::kFloat)};
  for (int l = 0; l < L; ++l) grads.push_back((q * g[l / kIntBlock] * positions / c.microbatches).to(torch::kFloat));
  return grads;
}

std::vector<std::vector<torch::Tensor>> ClosedFormRun(const PipelineRankConfig& c, torch::ScalarType act, int steps) {
  IntegerStage whole(c.train.model, act, StageLayers{0, c.train.model.layers, true, true});
  const auto params = whole.TrainableParameters();
  torch::optim::AdamW opt(ParamGroups(params, c.train), torch::optim::AdamWOptions(c.train.lr));
  std::vector<std::vector<torch::Tensor>> after;
  for (int step = 0; step < steps; ++step) {
    for (auto& g : opt.param_groups())
      static_cast<torch::optim::AdamWOptions&>(g.options()).lr(LearningRate(c.train, step));
    const auto grads = ClosedFormGrads(c, Tokens(c, step));
    for (std::size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = grads[i].clone();
    ClipInPlace(params, std::sqrt(SumInOrder(GradSquares(params))), c.train.grad_clip);
    opt.step();
    std::vector<torch::Tensor> snapshot;
    for (const auto& p : params) snapshot.push_back(p.detach().clone());
    after.push_back(snapshot);
  }
  return after;
}

// Every parameter after every step, in the whole model's order; a
// forward-only pass runs between the steps.
Result<std::vector<std::vector<torch::Tensor>>> IntegerPipelineRun(const PipelineRankConfig& c, torch::ScalarType act,
                                                                   int steps) {
  const int stages = c.split.num_stages();
  std::vector<std::vector<std::vector<torch::Tensor>>> by_stage(steps, std::vector<std::vector<torch::Tensor>>(stages));
  std::mutex mu;
  auto factory = [&](int, const StageLayers& layers) -> Result<std::shared_ptr<PipelineStageModule>> {
    return std::shared_ptr<PipelineStageModule>(std::make_shared<IntegerStage>(c.train.model, act, layers));
  };
  const auto statuses = RunRanks(c.pp, [&](Communicator& comm) -> Status {
    KP_ASSIGN_OR_RETURN(auto rank, PipelineRank::Create(c, comm, factory));
    for (int step = 0; step < steps; ++step) {
      KP_RETURN_IF_ERROR(rank->TrainStep(Tokens(c, step)).status());
      KP_RETURN_IF_ERROR(rank->EvalStep(Tokens(c, 100 + step)).status());
      std::lock_guard<std::mutex> lock(mu);
      for (int s : rank->stages())
        for (const auto& p : rank->stage_module(s).TrainableParameters()) by_stage[step][s].push_back(p.detach().clone());
    }
    return Status::Ok();
  });
  KP_RETURN_IF_ERROR(FirstError(statuses));
  std::vector<std::vector<torch::Tensor>> out(steps);
  for (int step = 0; step < steps; ++step)
    for (const auto& stage : by_stage[step]) out[step].insert(out[step].end(), stage.begin(), stage.end());
  return out;
}

TEST(PipelineRuntimeTest, IntegerBlockGradientsExactCacheOnOffAndClosedForm) {
  ModelSpec spec = DebugSpec(9);
  spec.attn_res_block = kIntBlock;  // entries e, x3, x6
  // Uneven splits with blocks opening inside stages (x3 inside stage 1 of both, x6 inside stage 3 of the second).
  const std::vector<std::tuple<int, int, const char*>> shapes{{2, 2, "2,3,1,3"}, {2, 3, "1,3,1,2,1,1"}};
  for (torch::ScalarType act : {torch::kFloat, torch::kBFloat16})
    for (const auto& [pp, vp, split_text] : shapes) {
      PipelineRankConfig c = Config(spec, ScheduleKind::kInterleaved1F1B, pp, vp, true);
      c.train.options.dtype = act == torch::kBFloat16 ? DType::kBf16 : DType::kFp32;
      c.train.grad_clip = 1.0;  // active: the exact fp64 norm of exact gradients sets the same factor everywhere
      c.train.lr = 0.05;
      auto split = ParseSplit(split_text, spec.layers);
      ASSERT_TRUE(split.ok()) << split.status().message();
      c.split = *split;
      const std::string what = std::string(split_text) + (act == torch::kBFloat16 ? " bf16" : " fp32");
      const auto closed = ClosedFormRun(c, act, 3);
      auto cached = IntegerPipelineRun(c, act, 3);
      c.attnres_cache = false;
      auto naive = IntegerPipelineRun(c, act, 3);
      ASSERT_TRUE(cached.ok()) << cached.status().message();
      ASSERT_TRUE(naive.ok()) << naive.status().message();
      for (int step = 0; step < 3; ++step) {
        ASSERT_EQ(closed[step].size(), (*cached)[step].size()) << what;
        for (std::size_t i = 0; i < closed[step].size(); ++i) {
          EXPECT_TRUE(torch::equal(closed[step][i], (*cached)[step][i])) << what << " cached, step " << step + 1 << " param " << i;
          EXPECT_TRUE(torch::equal(closed[step][i], (*naive)[step][i])) << what << " naive, step " << step + 1 << " param " << i;
        }
      }
    }
}

// ---------------------------------------------------------------- tables, deposits, eval, guard

// Summed over ranks and divided by M: the simulator's per-micro-batch totals.
void CheckEntries(const Shape& shape, int block, int naive_entries, int cached_entries) {
  ModelSpec spec = DebugSpec(shape.layers);
  spec.attn_res_block = block;
  for (bool cache : {false, true}) {
    const PipelineRankConfig c = Config(spec, shape.kind, shape.pp, shape.vp, cache);
    auto run = Pipeline(c, 1);
    ASSERT_TRUE(run.ok()) << run.status().message();
    std::int64_t fwd = 0, bwd = 0, fwd_messages = 0;
    for (const PipelineStepResult& r : run->step1)
      for (const PipelineTraffic& t : r.traffic) {
        (t.forward ? fwd : bwd) += t.entries;
        if (t.forward) fwd_messages += t.messages;
        EXPECT_EQ(t.entry_bytes, t.entries * t.hidden_bytes / t.messages) << shape.name;
      }
    const int want = cache ? cached_entries : naive_entries;
    EXPECT_EQ(fwd, std::int64_t(want) * c.microbatches) << shape.name << (cache ? " cached" : " naive") << " forward";
    EXPECT_EQ(bwd, std::int64_t(want) * c.microbatches) << shape.name << (cache ? " cached" : " naive") << " backward";
    EXPECT_EQ(fwd_messages, std::int64_t(shape.pp * shape.vp - 1) * c.microbatches) << shape.name;
  }
}

TEST(PipelineRuntimeTest, MeasuredEntriesEqualTheSimulatorsTables) {
  CheckEntries(kPp2Vp2, 4, 5, 2);  // 8 layers, 2 blocks of 4
  CheckEntries(Shape{"pp4 x vp4", ScheduleKind::kInterleaved1F1B, 4, 4, 16, ""}, 4, 39, 12);
}

TEST(PipelineRuntimeTest, DroppedDepositFailsWithTheDepositCountError) {
  const PipelineRankConfig c = Config(DebugSpec(8), ScheduleKind::kInterleaved1F1B, 2, 2, true);
  const auto statuses = RunRanks(2, [&](Communicator& comm) -> Status {
    KP_ASSIGN_OR_RETURN(auto rank, PipelineRank::Create(c, comm));
    InjectFaults(*rank, ExecutorFaults{.drop_deposit_of_stage = 3});  // s3 deposits de and dx4 on rank 1 for s1
    return rank->TrainStep(Tokens(c, 0)).status();
  });
  // Rank 1 finds the missing deposit; rank 0 may fail waiting on it.
  ASSERT_FALSE(statuses[1].ok());
  EXPECT_NE(statuses[1].message().find("deposit count"), std::string::npos) << statuses[1].message();
}

TEST(PipelineRuntimeTest, ForwardOnlyPassLeavesEveryGradUntouched) {
  const PipelineRankConfig c = Config(DebugSpec(8), ScheduleKind::kInterleaved1F1B, 2, 2, true);
  const auto statuses = RunRanks(2, [&](Communicator& comm) -> Status {
    KP_ASSIGN_OR_RETURN(auto rank, PipelineRank::Create(c, comm));
    KP_RETURN_IF_ERROR(rank->TrainStep(Tokens(c, 0)).status());
    std::vector<torch::Tensor> before;
    for (int s : rank->stages())
      for (const auto& p : rank->stage_module(s).TrainableParameters())
        before.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
    KP_ASSIGN_OR_RETURN(double loss, rank->EvalStep(Tokens(c, 1)));
    if (!std::isfinite(loss)) return Status::Internal("eval loss not finite");
    std::size_t i = 0;
    for (int s : rank->stages())
      for (const auto& p : rank->stage_module(s).TrainableParameters()) {
        const torch::Tensor& b = before[i++];
        if (b.defined() != p.grad().defined() || (b.defined() && !torch::equal(b, p.grad())))
          return Status::Internal("eval touched a gradient of stage " + std::to_string(s));
      }
    return Status::Ok();
  });
  EXPECT_TRUE(FirstError(statuses).ok()) << FirstError(statuses).message();
}

TEST(PipelineRuntimeTest, CacheRefusesVShapedScheduleNamingTheFirstStageOff) {
  PipelineRankConfig c = Config(DebugSpec(8), ScheduleKind::kZbv, 2, 2, true);
  const auto statuses = RunRanks(2, [&](Communicator& comm) -> Status {
    return PipelineRank::Create(c, comm).status();
  });
  for (const Status& s : statuses) {
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("--schedule: zbv puts stage 2 on rank 1"), std::string::npos) << s.message();
  }
  c.attnres_cache = false;  // the naive transport runs any placement
  const RunResult ref = Reference(c, 1);
  auto got = Pipeline(c, 1);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(ref.losses[0], got->losses[0]);
  ExpectSameGrads(ref.grads, got->grads, 0, "zbv naive");
}

}  // namespace
}  // namespace kp::runtime
