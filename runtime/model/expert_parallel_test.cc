// Expert and expert-tensor parallelism over the in-process communicator, in
// fp64: one MoE layer (latent, shared expert, 4 experts of FFN 16) split
// over ep x etp ranks of rank_groups.h's layout, each rank with its own
// tokens, against the whole layer on every rank's tokens at once.
#include "runtime/model/expert_parallel.h"

#include <gtest/gtest.h>

#include <string>

#include "planner/memory_model.h"
#include "planner/plan_request.h"
#include "runtime/comm/in_process_communicator.h"
#include "runtime/comm/rank_groups.h"
#include "runtime/model/layers.h"
#include "runtime/model/model.h"
#include "runtime/model/test_util.h"
#include "specs/param_count.h"
#include "specs/stage_split.h"

namespace kp::runtime {
namespace {

Status Expect(bool ok, const std::string& what) { return ok ? Status::Ok() : Status::Internal(what); }

double RelativeError(const torch::Tensor& got, const torch::Tensor& want) {
  return (got - want).abs().max().item<double>() / (want.abs().max().item<double>() + 1e-300);
}

struct Split {
  int ep, etp;
};

// Rank r holds tokens [rN, rN + N) of the reference's world x N. Outputs
// and input gradients equal the reference's rows; each expert shard's
// gradient equals its slice of the reference's (the shard saw every row of
// its experts); the replicated parameters' gradients, summed over the
// ranks, equal the reference's. With etp 1 the routed outputs are bitwise
// (every expert sees the same rows in the same order); with ETP the FFN's
// partial sums add in another order than one GEMM, fp64 rounding apart.
TEST(ExpertParallelTest, SplitLayerEqualsTheWholeLayerOnEveryRanksTokens) {
  for (const Split split : {Split{2, 1}, Split{1, 2}, Split{2, 2}, Split{4, 1}}) {
    const int world = split.ep * split.etp;
    const std::string what = "ep " + std::to_string(split.ep) + " x etp " + std::to_string(split.etp);
    const auto statuses = RunRanks(world, [&](Communicator& c) -> Status {
      KP_ASSIGN_OR_RETURN(RankGroups groups, MakeRankGroups(c, GroupSizes{1, world, 1, split.ep, split.etp}));
      const int r = c.rank(), q = r % world, ep_rank = q / split.etp, etp_rank = q % split.etp;
      const ModelSpec spec = TinyKimiSpec();
      Init init_ref(11, 1), init_split(11, 1);
      auto ref = std::make_shared<MoeImpl>(spec, ModelOptions{}, 0.02, 0.01, init_ref);
      auto mine = std::make_shared<MoeImpl>(spec, ModelOptions{}, 0.02, 0.01, init_split);
      ref->to(torch::kDouble);
      mine->to(torch::kDouble);
      const std::int64_t experts = spec.moe.num_experts / split.ep, ffn = spec.moe.expert_ffn / split.etp;
      mine->experts().KeepExperts(ep_rank * experts, experts);
      mine->experts().KeepFfnShard(etp_rank * ffn, ffn);
      mine->SetExpertParallel(ExpertGroups{groups.ep, groups.etp});

      const std::int64_t n = 12, d = spec.hidden;
      torch::Tensor x_all = Init(42, 0).Normal({world * n, d}, 1.0).to(torch::kDouble);
      torch::Tensor w_all = Init(43, 0).Normal({world * n, d}, 1.0).to(torch::kDouble);
      const torch::Tensor x_ref = x_all.clone().requires_grad_(true);
      const torch::Tensor y_ref = ref->Mix(x_ref, false);
      (y_ref * w_all).sum().backward();
      const torch::Tensor x = x_all.narrow(0, r * n, n).clone().requires_grad_(true);
      const torch::Tensor y = mine->Mix(x, false);
      (y * w_all.narrow(0, r * n, n)).sum().backward();

      const double tol = split.etp == 1 ? 0 : 1e-13;
      KP_RETURN_IF_ERROR(Expect(RelativeError(y, y_ref.narrow(0, r * n, n)) <= tol, "output"));
      KP_RETURN_IF_ERROR(Expect(RelativeError(x.grad(), x_ref.grad().narrow(0, r * n, n)) <= tol, "input gradient"));
      const auto ref_experts = ref->experts().named_parameters();
      for (const auto& p : mine->experts().named_parameters()) {
        const torch::Tensor whole = ref_experts[p.key()].grad().narrow(0, ep_rank * experts, experts);
        const std::int64_t ffn_dim = p.key() == "down" ? 2 : 1;
        KP_RETURN_IF_ERROR(Expect(RelativeError(p.value().grad(), whole.narrow(ffn_dim, etp_rank * ffn, ffn)) <= tol,
                                  "expert gradient " + p.key()));
      }
      const auto ref_all = ref->named_parameters();
      for (const auto& p : mine->named_parameters()) {
        if (p.key().rfind("experts.", 0) == 0) continue;
        torch::Tensor g = p.value().grad().clone();
        KP_RETURN_IF_ERROR(c.AllReduceSum(g));
        KP_RETURN_IF_ERROR(Expect(RelativeError(g, ref_all[p.key()].grad()) <= 1e-12, "replicated " + p.key()));
      }
      return Status::Ok();
    });
    EXPECT_TRUE(FirstError(statuses).ok()) << what << ": " << FirstError(statuses).message();
  }
}

// What ShardExperts takes off a rank is what the planner's ShardParams takes
// off it (the routed experts over ep x etp), parameter for parameter.
TEST(ExpertParallelTest, WhatTheSplitTakesOffARankIsThePlannersCount) {
  const ModelSpec spec = TinyKimiSpec();
  PlanRequest req;
  req.model = spec;
  const Result<StageSplit> one_stage = EvenSplit(spec.layers, 1);
  ASSERT_TRUE(one_stage.ok());
  const RankParamSums sums = ParamSumsOfRank(req, *one_stage, CountParams(spec), {0});
  for (const Split split : {Split{2, 1}, Split{1, 2}, Split{2, 2}}) {
    ParallelPlan whole, plan;
    plan.ep = split.ep, plan.etp = split.etp;
    const RankParams all = ShardParams(sums, whole), mine = ShardParams(sums, plan);
    const double planner_saved = all.dense + all.expert - (mine.dense + mine.expert);
    const int world = split.ep * split.etp;
    const auto statuses = RunRanks(world, [&](Communicator& c) -> Status {
      KP_ASSIGN_OR_RETURN(RankGroups groups, MakeRankGroups(c, GroupSizes{1, world, 1, split.ep, split.etp}));
      KP_ASSIGN_OR_RETURN(std::shared_ptr<StageModelImpl> model, BuildModel(spec, {}));
      const std::int64_t before = CountElements(model->parameters());
      KP_RETURN_IF_ERROR(ShardExperts(*model, ExpertGroups{groups.ep, groups.etp}));
      const double saved = double(before - CountElements(model->parameters()));
      return Expect(saved == planner_saved && planner_saved > 0,
                    "the split saves " + std::to_string(saved) + ", the planner " + std::to_string(planner_saved));
    });
    EXPECT_TRUE(FirstError(statuses).ok()) << "ep " << split.ep << " x etp " << split.etp << ": "
                                           << FirstError(statuses).message();
  }
}

}  // namespace
}  // namespace kp::runtime
