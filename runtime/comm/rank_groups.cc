#include "runtime/comm/rank_groups.h"

namespace kp::runtime {

ReplicaGroups RankGroups::Replicas() const {
  const int dp_size = dp != nullptr ? dp->size() : 1;
  return ReplicaGroups{dp, ep != nullptr ? expert_dp.get() : dp, ep.get(), dp_size};
}

namespace {

std::vector<int> Range(int first, int count, int stride) {
  std::vector<int> v;
  for (int i = 0; i < count; ++i) v.push_back(first + i * stride);
  return v;
}

}  // namespace

Result<RankGroups> MakeRankGroups(Communicator& world, int pp, int dp, int ep) {
  if (pp < 1 || dp < 1 || ep < 1 || world.size() != pp * dp || dp % ep != 0)
    return Status::InvalidArgument("groups: a world of " + std::to_string(world.size()) + " ranks is not pp " +
                                   std::to_string(pp) + " x dp " + std::to_string(dp) + " with ep " +
                                   std::to_string(ep) + " dividing dp");
  RankGroups g;
  g.pp_rank = world.rank() / dp;
  g.dp_rank = world.rank() % dp;
  g.pipeline = dp == 1 ? &world : nullptr;
  if (pp > 1 && dp > 1) {
    KP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> pipe, world.Subgroup(Range(g.dp_rank, pp, dp)));
    g.pipeline = g.owned.emplace_back(std::move(pipe)).get();
  }
  g.dp = pp == 1 ? &world : nullptr;
  if (pp > 1 && dp > 1) {
    KP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> replicas, world.Subgroup(Range(g.pp_rank * dp, dp, 1)));
    g.dp = g.owned.emplace_back(std::move(replicas)).get();
  }
  if (ep == 1) return g;
  const int block = g.dp_rank / ep * ep;
  KP_ASSIGN_OR_RETURN(g.ep, g.dp->Subgroup(Range(block, ep, 1)));
  if (dp / ep > 1) {
    KP_ASSIGN_OR_RETURN(g.expert_dp, g.dp->Subgroup(Range(g.dp_rank % ep, dp / ep, ep)));
  }
  return g;
}

}  // namespace kp::runtime
