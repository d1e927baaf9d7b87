// The rank layout of rank_groups.h over in-process worlds: each group's
// members, identified exactly by the sum of 2^(world rank) over the group,
// against the layout's formulas computed here.
#include "runtime/comm/rank_groups.h"

#include <gtest/gtest.h>

#include <string>

#include <torch/torch.h>

#include "runtime/comm/in_process_communicator.h"

namespace kp::runtime {
namespace {

// The members of `group` as a bit set of world ranks (collective over it);
// a null group is this rank alone.
Result<std::int64_t> Members(Communicator* group, int world_rank) {
  torch::Tensor bits = torch::full({1}, std::int64_t{1} << world_rank, torch::kLong);
  if (group != nullptr) KP_RETURN_IF_ERROR(group->AllReduceSum(bits));
  return bits.item<std::int64_t>();
}

std::int64_t BitsOf(int first, int count, int stride) {
  std::int64_t bits = 0;
  for (int i = 0; i < count; ++i) bits |= std::int64_t{1} << (first + i * stride);
  return bits;
}

Status Expect(bool ok, const std::string& what) { return ok ? Status::Ok() : Status::Internal(what); }

TEST(RankGroupsTest, TensorParallelIsInnermostThenDataThenPipeline) {
  struct Layout {
    int pp, dp, tp;
  };
  for (const Layout& l : {Layout{2, 2, 2}, Layout{1, 2, 2}, Layout{2, 1, 3}, Layout{2, 4, 1}, Layout{1, 1, 4}}) {
    const auto statuses = RunRanks(l.pp * l.dp * l.tp, [&](Communicator& world) -> Status {
      KP_ASSIGN_OR_RETURN(RankGroups g, MakeRankGroups(world, GroupSizes{l.pp, l.dp, l.tp}));
      const int r = world.rank(), tp_rank = r % l.tp, replica = r / l.tp;
      const int pp_rank = replica / l.dp, dp_rank = replica % l.dp;
      KP_RETURN_IF_ERROR(Expect(g.tp_rank == tp_rank && g.dp_rank == dp_rank && g.pp_rank == pp_rank, "coordinates"));
      KP_ASSIGN_OR_RETURN(const std::int64_t tp, Members(g.tp, r));
      KP_RETURN_IF_ERROR(Expect(tp == BitsOf(replica * l.tp, l.tp, 1), "tp group"));
      KP_ASSIGN_OR_RETURN(const std::int64_t pipe, Members(g.pipeline, r));
      KP_RETURN_IF_ERROR(Expect(pipe == BitsOf(dp_rank * l.tp + tp_rank, l.pp, l.dp * l.tp), "pipeline group"));
      KP_ASSIGN_OR_RETURN(const std::int64_t dp, Members(g.dp, r));
      KP_RETURN_IF_ERROR(Expect(dp == BitsOf(pp_rank * l.dp * l.tp + tp_rank, l.dp, l.tp), "dp group"));
      return Expect(g.ep == nullptr && g.etp == nullptr && g.expert_shards == nullptr && g.expert_dp == nullptr,
                    "no expert groups");
    });
    EXPECT_TRUE(FirstError(statuses).ok()) << "pp " << l.pp << " dp " << l.dp << " tp " << l.tp << ": "
                                           << FirstError(statuses).message();
  }
}

// The expert groups over a stage's tp x dp ranks x = dp_rank * tp + tp_rank:
// blocks of ep x etp consecutive x, ETP innermost, EP at stride etp,
// expert-DP at stride ep x etp (Megatron's MoE folding).
TEST(RankGroupsTest, ExpertGroupsFoldEtpInnermostThenEpIntoTheStagesRanks) {
  for (const GroupSizes& l : {GroupSizes{1, 4, 1, 2, 2}, GroupSizes{2, 4, 1, 2, 1}, GroupSizes{1, 4, 1, 1, 2},
                              GroupSizes{2, 4, 1, 2, 2}, GroupSizes{1, 8, 1, 2, 2}, GroupSizes{1, 2, 2, 2, 1},
                              GroupSizes{2, 2, 2, 2, 2}}) {
    const auto statuses = RunRanks(l.pp * l.dp * l.tp, [&](Communicator& world) -> Status {
      KP_ASSIGN_OR_RETURN(RankGroups g, MakeRankGroups(world, l));
      const int r = world.rank(), stage = r / (l.dp * l.tp) * (l.dp * l.tp), x = r - stage;
      const int span = l.ep * l.etp, block = stage + x / span * span, q = x % span;
      KP_ASSIGN_OR_RETURN(const std::int64_t ep, Members(g.ep, r));
      KP_RETURN_IF_ERROR(Expect(ep == BitsOf(block + q % l.etp, l.ep, l.etp), "ep group"));
      KP_ASSIGN_OR_RETURN(const std::int64_t etp, Members(g.etp, r));
      KP_RETURN_IF_ERROR(Expect(etp == BitsOf(block + q / l.etp * l.etp, l.etp, 1), "etp group"));
      KP_ASSIGN_OR_RETURN(const std::int64_t shards, Members(g.expert_shards, r));
      KP_RETURN_IF_ERROR(Expect(shards == BitsOf(block, span, 1), "expert shards"));
      KP_ASSIGN_OR_RETURN(const std::int64_t expert_dp, Members(g.expert_dp, r));
      return Expect(expert_dp == BitsOf(stage + q, l.dp * l.tp / span, span), "expert-dp group");
    });
    EXPECT_TRUE(FirstError(statuses).ok()) << "pp " << l.pp << " dp " << l.dp << " tp " << l.tp << " ep " << l.ep
                                           << " etp " << l.etp << ": " << FirstError(statuses).message();
  }
}

// CP next to TP: rank = ((pp_rank dp + dp_rank) cp + cp_rank) tp + tp_rank;
// the CP group at stride tp, DP at stride cp tp, DP x CP at stride tp, the
// pipeline at stride dp cp tp; experts fold over the stage's tp cp dp ranks.
TEST(RankGroupsTest, ContextParallelIsNextToTensorParallel) {
  for (const GroupSizes& l : {GroupSizes{2, 2, 1, 1, 1, 2}, GroupSizes{1, 2, 2, 1, 1, 2}, GroupSizes{2, 1, 2, 1, 2, 2},
                              GroupSizes{1, 1, 1, 3, 1, 3}}) {
    const auto statuses = RunRanks(l.pp * l.dp * l.cp * l.tp, [&](Communicator& world) -> Status {
      KP_ASSIGN_OR_RETURN(RankGroups g, MakeRankGroups(world, l));
      const int r = world.rank(), tp_rank = r % l.tp, cp_rank = r / l.tp % l.cp;
      const int dp_rank = r / (l.tp * l.cp) % l.dp, pp_rank = r / (l.tp * l.cp * l.dp);
      const int stage = pp_rank * l.dp * l.cp * l.tp;
      KP_RETURN_IF_ERROR(Expect(g.tp_rank == tp_rank && g.cp_rank == cp_rank && g.dp_rank == dp_rank &&
                                    g.pp_rank == pp_rank, "coordinates"));
      KP_ASSIGN_OR_RETURN(const std::int64_t cp, Members(g.cp, r));
      KP_RETURN_IF_ERROR(Expect(cp == BitsOf(r - cp_rank * l.tp, l.cp, l.tp), "cp group"));
      KP_ASSIGN_OR_RETURN(const std::int64_t dp, Members(g.dp, r));
      KP_RETURN_IF_ERROR(Expect(dp == BitsOf(stage + cp_rank * l.tp + tp_rank, l.dp, l.cp * l.tp), "dp group"));
      KP_ASSIGN_OR_RETURN(const std::int64_t dp_cp, Members(g.dp_cp, r));
      KP_RETURN_IF_ERROR(Expect(dp_cp == BitsOf(stage + tp_rank, l.dp * l.cp, l.tp), "dp x cp group"));
      KP_ASSIGN_OR_RETURN(const std::int64_t pipe, Members(g.pipeline, r));
      KP_RETURN_IF_ERROR(Expect(pipe == BitsOf(r - stage, l.pp, l.dp * l.cp * l.tp), "pipeline group"));
      const int span = l.ep * l.etp, x = r - stage;
      KP_ASSIGN_OR_RETURN(const std::int64_t shards, Members(g.expert_shards, r));
      return Expect(shards == BitsOf(stage + x / span * span, span, 1), "expert shards");
    });
    EXPECT_TRUE(FirstError(statuses).ok()) << "pp " << l.pp << " dp " << l.dp << " tp " << l.tp << " cp " << l.cp
                                           << ": " << FirstError(statuses).message();
  }
}

TEST(RankGroupsTest, AWorldThatIsNotTheProductIsRefused) {
  const auto statuses = RunRanks(6, [](Communicator& world) -> Status {
    const Result<RankGroups> g = MakeRankGroups(world, GroupSizes{2, 2, 2, 1, 1});
    return Expect(!g.ok() && g.status().message() == "groups: a world of 6 ranks is not pp 2 x dp 2 x cp 1 x tp 2 "
                                                     "with ep 1 x etp 1 dividing tp x cp x dp",
                  g.ok() ? "accepted" : g.status().message());
  });
  EXPECT_TRUE(FirstError(statuses).ok()) << FirstError(statuses).message();
}

}  // namespace
}  // namespace kp::runtime
