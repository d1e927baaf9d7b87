// Tensor parallelism over the in-process communicator: each collective
// against its definition computed locally from every rank's (seeded)
// inputs, each backward against the conjugate collective's definition, a
// SwiGLU split over 2 and 3 ranks against the whole layer, and whole models
// (KDA + MLA + MoE + AttnRes; grouped-query MHA) split over 2 ranks, with
// and without sequence parallelism, against one process, all in fp64.
#include "runtime/model/tensor_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "planner/memory_model.h"
#include "planner/plan_request.h"
#include "runtime/comm/in_process_communicator.h"
#include "runtime/model/layers.h"
#include "runtime/model/model.h"
#include "runtime/model/test_util.h"
#include "specs/param_count.h"
#include "specs/stage_split.h"

namespace kp::runtime {
namespace {

// Rank r's tensor: seeded by (seed, r), so every rank can make every rank's.
torch::Tensor Seeded(std::uint64_t seed, int rank, at::IntArrayRef shape) {
  return Init(seed, static_cast<std::uint64_t>(rank)).Normal(shape, 1.0).to(torch::kDouble);
}

Status Expect(bool ok, const std::string& what) { return ok ? Status::Ok() : Status::Internal(what); }

bool Close(const torch::Tensor& a, const torch::Tensor& b, double tol) {
  return a.sizes() == b.sizes() && (a - b).abs().max().item<double>() <= tol * (1 + b.abs().max().item<double>());
}

TEST(TensorParallelTest, AllGatherAndReduceScatterMatchTheirDefinitions) {
  const int n = 3;
  const auto statuses = RunRanks(n, [&](Communicator& c) -> Status {
    const torch::Tensor x = Seeded(1, c.rank(), {2, 6, 4});
    std::vector<torch::Tensor> all;
    for (int r = 0; r < n; ++r) all.push_back(Seeded(1, r, {2, 6, 4}));
    KP_ASSIGN_OR_RETURN(const torch::Tensor gathered, AllGather(c, x, 1));
    KP_RETURN_IF_ERROR(Expect(torch::equal(gathered, torch::cat(all, 1)), "all-gather"));
    KP_ASSIGN_OR_RETURN(const torch::Tensor scattered, ReduceScatter(c, x, 1));
    const torch::Tensor sum = (all[0] + all[1]) + all[2];  // rank order
    KP_RETURN_IF_ERROR(Expect(torch::equal(scattered, sum.narrow(1, 2 * c.rank(), 2)), "reduce-scatter"));
    const Result<torch::Tensor> bad = ReduceScatter(c, Seeded(1, c.rank(), {2, 5}), 1);
    return Expect(!bad.ok() && bad.status().message().find("do not divide") != std::string::npos,
                  "a length 5 over 3 ranks is refused");
  });
  EXPECT_TRUE(FirstError(statuses).ok()) << FirstError(statuses).message();
}

// Each collective's forward and the gradient it sends back for upstream
// gradients seeded per rank, both computed here from every rank's tensors.
TEST(TensorParallelTest, EachCollectivesBackwardIsItsConjugate) {
  const int n = 2;
  const auto statuses = RunRanks(n, [&](Communicator& c) -> Status {
    const int me = c.rank();
    std::vector<torch::Tensor> xs, gs_full, gs_half;
    for (int r = 0; r < n; ++r) {
      xs.push_back(Seeded(10, r, {3, 4}));
      gs_full.push_back(Seeded(20, r, {3, 4}));
      gs_half.push_back(Seeded(30, r, {3, 2}));
    }
    const torch::Tensor x = xs[me].clone().requires_grad_(true);
    auto grad_of = [&](const torch::Tensor& y, const torch::Tensor& upstream) {
      return torch::autograd::grad({y}, {x}, {upstream})[0];
    };
    // Copy: identity forward; the upstream gradients summed.
    torch::Tensor y = CopyToTensorParallel(c, x);
    KP_RETURN_IF_ERROR(Expect(torch::equal(y, xs[me]), "copy forward"));
    KP_RETURN_IF_ERROR(Expect(torch::equal(grad_of(y, gs_full[me]), gs_full[0] + gs_full[1]), "copy backward"));
    // Reduce: the sum forward; the gradient passes.
    y = ReduceFromTensorParallel(c, x);
    KP_RETURN_IF_ERROR(Expect(torch::equal(y, xs[0] + xs[1]), "reduce forward"));
    KP_RETURN_IF_ERROR(Expect(torch::equal(grad_of(y, gs_full[me]), gs_full[me]), "reduce backward"));
    // Gather along dim 1: [3, 8]; backward: the sum's shard of this rank.
    y = GatherSequence(c, x, 1);
    KP_RETURN_IF_ERROR(Expect(torch::equal(y, torch::cat(xs, 1)), "gather forward"));
    const torch::Tensor g8_me = torch::cat({gs_full[me], gs_full[me]}, 1) * (me + 1);
    const torch::Tensor g8_sum = torch::cat({gs_full[0], gs_full[0]}, 1) * 1 + torch::cat({gs_full[1], gs_full[1]}, 1) * 2;
    KP_RETURN_IF_ERROR(Expect(torch::equal(grad_of(y, g8_me), g8_sum.narrow(1, 4 * me, 4)), "gather backward"));
    // Scatter along dim 1: the sum's shard [3, 2]; backward: every rank's gradient gathered.
    y = ScatterSequence(c, x, 1);
    KP_RETURN_IF_ERROR(Expect(torch::equal(y, (xs[0] + xs[1]).narrow(1, 2 * me, 2)), "scatter forward"));
    KP_RETURN_IF_ERROR(Expect(torch::equal(grad_of(y, gs_half[me]), torch::cat(gs_half, 1)), "scatter backward"));
    // Split along dim 1: own shard; backward: every rank's gradient gathered.
    y = SplitSequence(c, x, 1);
    KP_RETURN_IF_ERROR(Expect(torch::equal(y, xs[me].narrow(1, 2 * me, 2)), "split forward"));
    return Expect(torch::equal(grad_of(y, gs_half[me]), torch::cat(gs_half, 1)), "split backward");
  });
  EXPECT_TRUE(FirstError(statuses).ok()) << FirstError(statuses).message();
}

struct SwiGluRun {
  torch::Tensor out, dx, dgate, dup, ddown;
};

// Forward and backward of a SwiGLU (dim 8, hidden 12, fp64) built from
// seed 5; with `tp`, sharded over it first.
SwiGluRun RunSwiGlu(Communicator* tp) {
  Init init(5);
  SwiGluImpl ffn(8, 12, /*gated=*/true, 0.3, 0.3, init, /*fused=*/false);
  ffn.to(torch::kDouble);
  TensorParallelSplit split;
  if (tp != nullptr && !ShardSwiGlu(ffn, TensorParallelRegion(tp, false), &split).ok())
    throw std::runtime_error("shard");
  const torch::Tensor x = Seeded(40, 0, {2, 5, 8}).requires_grad_(true);
  const torch::Tensor w = Seeded(41, 0, {2, 5, 8});
  SwiGluRun r;
  r.out = ffn.Mix(x, false);
  const auto g = torch::autograd::grad({(r.out * w).sum()},
                                       {x, ffn.gate()->weight(), ffn.up().weight(), ffn.down().weight()});
  r.dx = g[0];
  r.dgate = g[1];
  r.dup = g[2];
  r.ddown = g[3];
  return r;
}

TEST(TensorParallelTest, ASwiGluSplitOverTwoOrThreeRanksEqualsTheWholeLayer) {
  const SwiGluRun whole = RunSwiGlu(nullptr);
  for (int n : {2, 3}) {
    const auto statuses = RunRanks(n, [&](Communicator& c) -> Status {
      const SwiGluRun part = RunSwiGlu(&c);
      const std::int64_t local = 12 / n, first = c.rank() * local;
      // fp64: only the final sum's order differs from the whole layer's.
      KP_RETURN_IF_ERROR(Expect(Close(part.out, whole.out, 1e-12), "output"));
      KP_RETURN_IF_ERROR(Expect(Close(part.dx, whole.dx, 1e-12), "input gradient"));
      KP_RETURN_IF_ERROR(Expect(Close(part.dgate, whole.dgate.narrow(0, first, local), 1e-12), "gate gradient"));
      KP_RETURN_IF_ERROR(Expect(Close(part.dup, whole.dup.narrow(0, first, local), 1e-12), "up gradient"));
      return Expect(Close(part.ddown, whole.ddown.narrow(1, first, local), 1e-12), "down gradient");
    });
    EXPECT_TRUE(FirstError(statuses).ok()) << "tp " << n << ": " << FirstError(statuses).message();
  }
}

// The vocabulary-parallel loss and lookup against torch's on the whole
// vocabulary (fp64), over 2 and 4 ranks, with an ignored target and targets
// on every shard.
TEST(TensorParallelTest, VocabParallelLossAndEmbeddingEqualTheWholeVocabulary) {
  const std::int64_t n_rows = 7, vocab = 12, dim = 3;
  const torch::Tensor logits = Seeded(50, 0, {n_rows, vocab}) * 3;
  const torch::Tensor targets = torch::tensor({0, 11, 5, -100, 6, 3, 9}, torch::kLong);
  const torch::Tensor upstream = Seeded(51, 0, {n_rows});
  const torch::Tensor whole = logits.clone().requires_grad_(true);
  const torch::Tensor want = torch::nn::functional::cross_entropy(
      whole, targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  const torch::Tensor want_grad = torch::autograd::grad({(want * upstream).sum()}, {whole})[0];
  const torch::Tensor table = Seeded(52, 0, {vocab, dim});
  const torch::Tensor tokens = torch::tensor({{0, 11, 5}, {6, 3, 9}}, torch::kLong);
  const torch::Tensor rows_up = Seeded(53, 0, {2, 3, dim});
  const torch::Tensor table_leaf = table.clone().requires_grad_(true);
  const torch::Tensor want_rows = torch::embedding(table_leaf, tokens);
  const torch::Tensor want_table_grad = torch::autograd::grad({(want_rows * rows_up).sum()}, {table_leaf})[0];
  for (int n : {2, 4}) {
    const auto statuses = RunRanks(n, [&](Communicator& c) -> Status {
      const std::int64_t width = vocab / n, first = c.rank() * width;
      const torch::Tensor local = logits.narrow(1, first, width).clone().requires_grad_(true);
      const torch::Tensor loss = VocabParallelCrossEntropy(c, local, targets);
      KP_RETURN_IF_ERROR(Expect(Close(loss, want, 1e-12), "loss"));
      const torch::Tensor grad = torch::autograd::grad({(loss * upstream).sum()}, {local})[0];
      KP_RETURN_IF_ERROR(Expect(Close(grad, want_grad.narrow(1, first, width), 1e-12), "loss gradient"));
      const torch::Tensor shard = table.narrow(0, first, width).clone().requires_grad_(true);
      const torch::Tensor rows = VocabParallelEmbedding(TensorParallelRegion(&c, false), shard, tokens);
      KP_RETURN_IF_ERROR(Expect(torch::equal(rows, want_rows.detach()), "embedding rows"));
      const torch::Tensor table_grad = torch::autograd::grad({(rows * rows_up).sum()}, {shard})[0];
      return Expect(torch::equal(table_grad, want_table_grad.narrow(0, first, width)), "embedding gradient");
    });
    EXPECT_TRUE(FirstError(statuses).ok()) << "tp " << n << ": " << FirstError(statuses).message();
  }
}

TEST(TensorParallelTest, ATpThatDoesNotDivideTheHiddenUnitsIsRefusedNamingTheFlag) {
  const auto statuses = RunRanks(5, [](Communicator& c) -> Status {
    Init init(5);
    SwiGluImpl ffn(8, 12, true, 0.3, 0.3, init, false);
    TensorParallelSplit split;
    const Status s = ShardSwiGlu(ffn, TensorParallelRegion(&c, false), &split);
    return Expect(s.code() == Status::Code::kInvalidArgument && s.message().rfind("--tp: 5 does not divide", 0) == 0 &&
                      ffn.up().weight().size(0) == 12,
                  "got: " + s.message());
  });
  EXPECT_TRUE(FirstError(statuses).ok()) << FirstError(statuses).message();
}

// ------------------------------------------------------------------ whole models

struct ModelRun {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;
  std::vector<torch::Tensor> router_loads;
  TensorParallelSplit split;
};

// One training micro-batch of `spec` in fp64 (B 2, T 8, one ignored
// target): the loss, every parameter's gradient and the routers' loads;
// with `tp`, the model split over it first and the partial gradients summed.
Result<ModelRun> RunModel(const ModelSpec& spec, Communicator* tp, bool sequence_parallel) {
  ModelOptions options;
  options.kda_chunk = 4;
  KP_ASSIGN_OR_RETURN(std::shared_ptr<StageModelImpl> model, BuildModel(spec, options));
  model->to(torch::kDouble);
  {
    // Non-trivial depth reads and norm weights, so a misplaced partial sum shows.
    torch::NoGradGuard no_grad;
    Init init(77);
    for (auto& p : model->named_parameters())
      if (p.key().find("_res.") != std::string::npos || p.key().find("norm") != std::string::npos)
        p.value().add_(init.Normal(p.value().sizes(), 0.5).to(torch::kDouble));
  }
  ModelRun run;
  if (tp != nullptr) {
    KP_ASSIGN_OR_RETURN(run.split, ShardTensorParallel(*model, *tp, sequence_parallel, 8));
  }
  Init data(5);
  const torch::Tensor tokens = data.Uniform({2, 9}, 0, spec.vocab).floor().to(torch::kLong).clamp(0, spec.vocab - 1);
  torch::Tensor targets = tokens.narrow(1, 1, 8).clone();
  targets[1][3] = -100;
  ForwardContext ctx;
  ctx.record_router_load = true;
  const torch::Tensor loss = model->HeadLoss(model->RunLayers(model->Embed(tokens.narrow(1, 0, 8)), ctx), targets);
  loss.backward();
  if (tp != nullptr) KP_RETURN_IF_ERROR(ReduceTensorParallelGradients(*tp, *model, run.split, sequence_parallel));
  run.loss = loss.item<double>();
  for (const auto& p : model->named_parameters())
    run.grads[p.key()] = p.value().grad().defined() ? p.value().grad().clone() : torch::zeros_like(p.value());
  for (const auto& layer : model->layers())
    if (layer->moe() != nullptr) run.router_loads.push_back(layer->moe()->router().load().clone());
  return run;
}

// Every gradient of `part` against the whole's: the slice a shard keeps,
// or the whole gradient; fp64, so only the order of sums differs.
Status CompareWithWhole(const ModelRun& part, const ModelRun& whole) {
  KP_RETURN_IF_ERROR(Expect(std::abs(part.loss - whole.loss) <= 1e-12 * std::abs(whole.loss),
                            "loss " + std::to_string(part.loss) + " vs " + std::to_string(whole.loss)));
  KP_RETURN_IF_ERROR(Expect(part.grads.size() == whole.grads.size(), "parameter count"));
  for (const auto& [name, grad] : part.grads) {
    const auto shard = part.split.shards.find(name);
    const torch::Tensor want = shard == part.split.shards.end()
                                   ? whole.grads.at(name)
                                   : whole.grads.at(name).narrow(shard->second.dim, shard->second.first,
                                                                 shard->second.count);
    KP_RETURN_IF_ERROR(Expect(Close(grad, want, 1e-10), "gradient of " + name));
  }
  for (std::size_t i = 0; i < whole.router_loads.size(); ++i)
    KP_RETURN_IF_ERROR(Expect(torch::equal(part.router_loads[i], whole.router_loads[i]), "router load"));
  return Status::Ok();
}

TEST(TensorParallelModelTest, TwoRanksWithAndWithoutSequenceParallelEqualOneProcess) {
  for (const ModelSpec& spec : {TinyKimiSpec(), TinyGptSpec()}) {
    const Result<ModelRun> whole = RunModel(spec, nullptr, false);
    ASSERT_TRUE(whole.ok()) << whole.status().message();
    for (bool sp : {false, true}) {
      const auto statuses = RunRanks(2, [&](Communicator& c) -> Status {
        KP_ASSIGN_OR_RETURN(const ModelRun part, RunModel(spec, &c, sp));
        // Every map the split keeps whole is listed as partial with SP;
        // without SP only KDA's gated-norm weight (shared by the heads).
        std::size_t partial_norms = 0;
        for (const std::string& name : part.split.partial) partial_norms += name.find("o_norm") != std::string::npos;
        KP_RETURN_IF_ERROR(Expect(sp ? part.split.partial.size() + part.split.shards.size() == part.grads.size()
                                     : part.split.partial.size() == partial_norms,
                                  "the partial parameters"));
        KP_RETURN_IF_ERROR(Expect(part.split.shards.count("embedding.weight") == 1 &&
                                      part.split.shards.count("head.lm_head.weight") == 1,
                                  "vocabulary shards"));
        return CompareWithWhole(part, *whole);
      });
      EXPECT_TRUE(FirstError(statuses).ok()) << spec.name << (sp ? " with SP: " : ": ") << FirstError(statuses).message();
    }
  }
}

// The Kimi model's split keeps these slices on rank 1 of 2 (heads of 8 / 8
// wide, 2 heads; MLA q 12 and kv_b 16 per head; FFN 48; vocabulary 48).
TEST(TensorParallelModelTest, TheSplitKeepsEachRanksHeadsAndVocabulary) {
  const auto statuses = RunRanks(2, [&](Communicator& c) -> Status {
    KP_ASSIGN_OR_RETURN(std::shared_ptr<StageModelImpl> model, BuildModel(TinyKimiSpec(), {}));
    KP_ASSIGN_OR_RETURN(const TensorParallelSplit split, ShardTensorParallel(*model, c, false, 8));
    if (c.rank() != 1) return Status::Ok();
    auto is = [&](const std::string& name, std::int64_t dim, std::int64_t first, std::int64_t count) {
      const auto it = split.shards.find(name);
      return Expect(it != split.shards.end() && it->second.dim == dim && it->second.first == first &&
                        it->second.count == count && it->second.whole == 2 * count,
                    "shard of " + name);
    };
    KP_RETURN_IF_ERROR(is("layers.1.attention.q_proj.weight", 0, 8, 8));
    KP_RETURN_IF_ERROR(is("layers.1.attention.A_log", 0, 1, 1));
    KP_RETURN_IF_ERROR(is("layers.1.attention.o_proj.weight", 1, 8, 8));
    KP_RETURN_IF_ERROR(is("layers.2.attention.q.weight", 0, 12, 12));
    KP_RETURN_IF_ERROR(is("layers.2.attention.kv_b.weight", 0, 16, 16));
    KP_RETURN_IF_ERROR(is("layers.0.ffn.down.weight", 1, 24, 24));
    KP_RETURN_IF_ERROR(is("embedding.weight", 0, 24, 24));
    KP_RETURN_IF_ERROR(Expect(split.shards.count("layers.2.attention.kv_a.weight") == 0, "kv_a stays whole"));
    return Expect(model->named_parameters()["layers.1.attention.q_conv"].size(0) == 8, "q_conv kept in place");
  });
  EXPECT_TRUE(FirstError(statuses).ok()) << FirstError(statuses).message();
}

TEST(TensorParallelModelTest, UnevenSplitsAreRefusedNamingTheFlagAndLeaveTheModelWhole) {
  struct Case {
    int tp;
    bool sp;
    std::int64_t seq;
    const char* message;
  };
  for (const Case& k : {Case{4, false, 8, "--tp: 4 does not divide the KDA layer's 2 heads"},
                        Case{2, true, 9, "--sequence-parallel: --tp 2 does not divide the sequence length 9"}}) {
    const auto statuses = RunRanks(k.tp, [&](Communicator& c) -> Status {
      KP_ASSIGN_OR_RETURN(std::shared_ptr<StageModelImpl> model, BuildModel(TinyKimiSpec(), {}));
      const std::int64_t before = CountElements(model->parameters());
      const Result<TensorParallelSplit> split = ShardTensorParallel(*model, c, k.sp, k.seq);
      return Expect(!split.ok() && split.status().code() == Status::Code::kInvalidArgument &&
                        split.status().message() == k.message && CountElements(model->parameters()) == before,
                    "got: " + (split.ok() ? std::string("ok") : split.status().message()));
    });
    EXPECT_TRUE(FirstError(statuses).ok()) << FirstError(statuses).message();
  }
}

// The planner's parameters per TP rank (planner/memory_model.h) against the
// runtime's split: what TP takes off a rank is exactly the planner's count
// (the router bias, the one difference of the whole counts, is whole on
// every rank on both sides).
TEST(TensorParallelModelTest, WhatTheSplitTakesOffARankIsThePlannersCount) {
  for (const ModelSpec& spec : {TinyKimiSpec(), TinyGptSpec()}) {
    const int tp = 2;
    PlanRequest req;
    req.model = spec;
    const Result<StageSplit> one_stage = EvenSplit(spec.layers, 1);
    ASSERT_TRUE(one_stage.ok());
    const RankParamSums sums = ParamSumsOfRank(req, *one_stage, CountParams(spec), {0});
    ParallelPlan whole, split;
    split.tp = tp;
    const RankParams all = ShardParams(sums, whole), mine = ShardParams(sums, split);
    const double planner_saved = all.dense + all.expert - (mine.dense + mine.expert);
    const auto statuses = RunRanks(tp, [&](Communicator& c) -> Status {
      KP_ASSIGN_OR_RETURN(std::shared_ptr<StageModelImpl> model, BuildModel(spec, {}));
      const std::int64_t before = CountElements(model->parameters());
      KP_RETURN_IF_ERROR(ShardTensorParallel(*model, c, true, 8).status());
      const double saved = double(before - CountElements(model->parameters()));
      return Expect(saved == planner_saved && planner_saved > 0,
                    "the split saves " + std::to_string(saved) + ", the planner " + std::to_string(planner_saved));
    });
    EXPECT_TRUE(FirstError(statuses).ok()) << spec.name << ": " << FirstError(statuses).message();
  }
}

}  // namespace
}  // namespace kp::runtime
