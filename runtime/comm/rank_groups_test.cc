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
    int pp, dp, ep, tp;
  };
  for (const Layout& l : {Layout{2, 2, 1, 2}, Layout{1, 2, 2, 2}, Layout{2, 1, 1, 3}, Layout{2, 4, 2, 1},
                          Layout{1, 1, 1, 4}}) {
    const auto statuses = RunRanks(l.pp * l.dp * l.tp, [&](Communicator& world) -> Status {
      KP_ASSIGN_OR_RETURN(RankGroups g, MakeRankGroups(world, l.pp, l.dp, l.ep, l.tp));
      const int r = world.rank(), tp_rank = r % l.tp, replica = r / l.tp;
      const int pp_rank = replica / l.dp, dp_rank = replica % l.dp;
      KP_RETURN_IF_ERROR(Expect(g.tp_rank == tp_rank && g.dp_rank == dp_rank && g.pp_rank == pp_rank, "coordinates"));
      KP_ASSIGN_OR_RETURN(const std::int64_t tp, Members(g.tp, r));
      KP_RETURN_IF_ERROR(Expect(tp == BitsOf(replica * l.tp, l.tp, 1), "tp group"));
      KP_ASSIGN_OR_RETURN(const std::int64_t pipe, Members(g.pipeline, r));
      KP_RETURN_IF_ERROR(Expect(pipe == BitsOf(dp_rank * l.tp + tp_rank, l.pp, l.dp * l.tp), "pipeline group"));
      KP_ASSIGN_OR_RETURN(const std::int64_t dp, Members(g.dp, r));
      KP_RETURN_IF_ERROR(Expect(dp == BitsOf(pp_rank * l.dp * l.tp + tp_rank, l.dp, l.tp), "dp group"));
      if (l.ep == 1) return Expect(g.ep == nullptr, "no ep group");
      KP_ASSIGN_OR_RETURN(const std::int64_t ep, Members(g.ep.get(), r));
      const int block = dp_rank / l.ep * l.ep;
      return Expect(ep == BitsOf((pp_rank * l.dp + block) * l.tp + tp_rank, l.ep, l.tp), "ep group");
    });
    EXPECT_TRUE(FirstError(statuses).ok()) << "pp " << l.pp << " dp " << l.dp << " ep " << l.ep << " tp " << l.tp
                                           << ": " << FirstError(statuses).message();
  }
}

TEST(RankGroupsTest, AWorldThatIsNotTheProductIsRefused) {
  const auto statuses = RunRanks(6, [](Communicator& world) -> Status {
    const Result<RankGroups> g = MakeRankGroups(world, 2, 2, 1, 2);
    return Expect(!g.ok() && g.status().message() == "groups: a world of 6 ranks is not pp 2 x dp 2 x tp 2 with ep 1 "
                                                     "dividing dp",
                  g.ok() ? "accepted" : g.status().message());
  });
  EXPECT_TRUE(FirstError(statuses).ok()) << FirstError(statuses).message();
}

}  // namespace
}  // namespace kp::runtime
