// Data and expert parallelism across real processes (Gloo on 127.0.0.1),
// each rank comparing itself with a single-process reference it computes
// itself. Each Parallel.X test spawns the ranks, which run ParallelRank.X.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/train/data.h"
#include "runtime/train/data_parallel.h"
#include "runtime/comm/dist_test_util.h"
#include "runtime/model/expert_parallel.h"
#include "runtime/model/layers.h"
#include "runtime/model/model.h"
#include "runtime/model/test_util.h"

namespace kp::runtime {
namespace {

using testing::ConnectThisRank;
using testing::IsRankProcess;
using testing::RunRanks;

std::shared_ptr<StageModelImpl> Tiny(std::uint64_t seed) {
  ModelOptions o;
  o.seed = seed;
  Result<std::shared_ptr<StageModelImpl>> m = BuildModel(TinyKimiSpec(), o);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? *m : nullptr;
}

torch::Tensor Loss(StageModelImpl& m, const torch::Tensor& rows, int t) {
  ForwardContext ctx;
  ctx.record_router_load = true;
  return LanguageModelLoss(m.forward(rows.narrow(1, 0, t), ctx), rows.narrow(1, 1, t));
}

// dp 2, fp32: rank r trains on rows [2r, 2r + 2) of a 4-row batch. The
// reference accumulates (loss_d / 2).backward() over both slices in one
// process. The step loss, every averaged gradient, the router loads and
// the clipped gradients are bitwise equal to it: halving is exact and a
// two-term sum does not depend on the order of its terms.
TEST(ParallelRank, DataParallel) {
  if (!IsRankProcess()) GTEST_SKIP() << "a rank of Parallel.DataParallelEqualsGradientAccumulation";
  std::unique_ptr<Communicator> world = ConnectThisRank();
  ASSERT_NE(world, nullptr);
  const int r = world->rank(), t = 12;
  std::vector<std::int64_t> tokens = SyntheticCorpus(TinyKimiSpec().vocab, 5).Batch(0, 4, t + 1);
  const torch::Tensor batch = torch::from_blob(tokens.data(), {4, t + 1}, torch::kLong).clone();

  std::shared_ptr<StageModelImpl> ref = Tiny(3), dp = Tiny(3);
  double ref_loss = 0;
  for (int d = 0; d < 2; ++d) {
    const torch::Tensor l = Loss(*ref, batch.narrow(0, 2 * d, 2), t);
    (l / 2).backward();
    ref_loss += l.item<double>();
  }
  ref_loss /= 2;

  const torch::Tensor l = Loss(*dp, batch.narrow(0, 2 * r, 2), t);
  l.backward();
  const std::vector<torch::Tensor> params = dp->TrainableParameters(), ref_params = ref->TrainableParameters();
  const SplitParameters split = SplitByReplication(*dp, params);
  const ReplicaGroups groups{world.get(), world.get(), nullptr, 2};
  ASSERT_TRUE(AverageGradients(split, groups, /*bucket_bytes=*/4096).ok());
  torch::Tensor loss_sum = l.detach().to(torch::kDouble).reshape({1}).clone();
  ASSERT_TRUE(world->AllReduceSum(loss_sum).ok());
  EXPECT_EQ(loss_sum.item<double>() / 2, ref_loss);

  ASSERT_EQ(params.size(), ref_params.size());
  int unequal = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!torch::equal(params[i].grad(), ref_params[i].grad())) ++unequal;
  }
  EXPECT_EQ(unequal, 0) << "of " << params.size() << " gradients differ from the reference";
  ASSERT_TRUE(SumRouterLoads(*dp, world.get()).ok());
  for (std::size_t i = 0; i < dp->layers().size(); ++i) {
    if (dp->layers()[i]->moe() == nullptr) continue;
    EXPECT_TRUE(torch::equal(dp->layers()[i]->moe()->router().load(), ref->layers()[i]->moe()->router().load()));
  }
  Result<double> norm = ClipGradientNorm(params, split, groups, 0.05);
  ASSERT_TRUE(norm.ok());
  EXPECT_EQ(*norm, torch::nn::utils::clip_grad_norm_(ref_params, 0.05));
  for (std::size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i].grad(), ref_params[i].grad()));
}

TEST(Parallel, DataParallelEqualsGradientAccumulation) {
  if (IsRankProcess()) GTEST_SKIP();
  EXPECT_EQ(RunRanks("ParallelRank.DataParallel", 2), (std::vector<int>{0, 0}));
}

// ep 2: one MoE layer (latent, shared expert) with its 4 experts split 2 + 2;
// rank r holds tokens [rN, rN + N) of the reference's 2N. Forward outputs,
// input gradients and the local experts' gradients are bitwise the
// reference's (every expert sees the same rows in the same order). The
// replicated parameters' gradients, summed over the two ranks, match to
// fp32 rounding: the reference reduces over all 2N tokens in one GEMM, the
// ranks over N each and then add.
TEST(ParallelRank, ExpertParallel) {
  if (!IsRankProcess()) GTEST_SKIP() << "a rank of Parallel.ExpertParallelEqualsOneProcess";
  std::unique_ptr<Communicator> world = ConnectThisRank();
  ASSERT_NE(world, nullptr);
  const int r = world->rank();
  const ModelSpec spec = TinyKimiSpec();
  const ModelOptions options;
  Init init_ref(11, 1), init_ep(11, 1);
  auto ref = std::make_shared<MoeImpl>(spec, options, 0.02, 0.01, init_ref);
  auto ep = std::make_shared<MoeImpl>(spec, options, 0.02, 0.01, init_ep);
  ep->experts().KeepExperts(2 * r, 2);
  ep->SetExpertParallel(ExpertGroups{world.get(), nullptr});

  const std::int64_t n = 24, d = spec.hidden;
  torch::manual_seed(42);
  const torch::Tensor x_all = torch::randn({2 * n, d}), w_all = torch::randn({2 * n, d});
  const torch::Tensor x_ref = x_all.clone().requires_grad_(true);
  const torch::Tensor y_ref = ref->Mix(x_ref, false);
  (y_ref * w_all).sum().backward();

  const torch::Tensor x = x_all.narrow(0, r * n, n).clone().requires_grad_(true);
  const torch::Tensor y = ep->Mix(x, false);
  (y * w_all.narrow(0, r * n, n)).sum().backward();

  EXPECT_TRUE(torch::equal(y, y_ref.narrow(0, r * n, n)));
  EXPECT_TRUE(torch::equal(x.grad(), x_ref.grad().narrow(0, r * n, n)));
  const auto ref_experts = ref->experts().named_parameters(), ep_experts = ep->experts().named_parameters();
  for (const auto& p : ep_experts) {
    const torch::Tensor g_ref = ref_experts[p.key()].grad().narrow(0, 2 * r, 2);
    EXPECT_TRUE(torch::equal(p.value().grad(), g_ref)) << p.key();
  }
  const auto ref_all = ref->named_parameters();
  for (const auto& p : ep->named_parameters()) {
    if (p.key().rfind("experts.", 0) == 0) continue;
    torch::Tensor g = p.value().grad().clone();
    ASSERT_TRUE(world->AllReduceSum(g).ok());
    // The same 2N terms in another association: within 2 (2N - 1) u of the
    // largest entry (u = 2^-24), with a factor 2 for the layer's two
    // products (the latent projection and the expert mixture).
    const torch::Tensor want = ref_all[p.key()].grad();
    const double bound = 2.0 * 2.0 * (2 * n - 1) * std::ldexp(1.0, -24);
    EXPECT_LE((g - want).abs().max().item<double>(), bound * want.abs().max().item<double>()) << p.key();
  }
}

TEST(Parallel, ExpertParallelEqualsOneProcess) {
  if (IsRankProcess()) GTEST_SKIP();
  EXPECT_EQ(RunRanks("ParallelRank.ExpertParallel", 2), (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace kp::runtime
