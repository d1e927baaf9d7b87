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

Result<RankGroups> MakeRankGroups(Communicator& world, int pp, int dp, int ep, int tp) {
  if (pp < 1 || dp < 1 || ep < 1 || tp < 1 || world.size() != pp * dp * tp || dp % ep != 0)
    return Status::InvalidArgument("groups: a world of " + std::to_string(world.size()) + " ranks is not pp " +
                                   std::to_string(pp) + " x dp " + std::to_string(dp) + " x tp " +
                                   std::to_string(tp) + " with ep " + std::to_string(ep) + " dividing dp");
  RankGroups g;
  const int replica = world.rank() / tp;  // pp_rank * dp + dp_rank
  g.tp_rank = world.rank() % tp;
  g.pp_rank = replica / dp;
  g.dp_rank = replica % dp;
  // A group that is the whole world is the world itself; a group of one is null.
  auto group = [&](int first, int count, int stride, Communicator** out) -> Status {
    if (count == world.size()) {
      *out = &world;
    } else if (count > 1) {
      KP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, world.Subgroup(Range(first, count, stride)));
      *out = g.owned.emplace_back(std::move(sub)).get();
    }
    return Status::Ok();
  };
  KP_RETURN_IF_ERROR(group(replica * tp, tp, 1, &g.tp));
  KP_RETURN_IF_ERROR(group(g.dp_rank * tp + g.tp_rank, pp, dp * tp, &g.pipeline));
  KP_RETURN_IF_ERROR(group(g.pp_rank * dp * tp + g.tp_rank, dp, tp, &g.dp));
  if (ep == 1) return g;
  const int block = g.dp_rank / ep * ep;
  KP_ASSIGN_OR_RETURN(g.ep, g.dp->Subgroup(Range(block, ep, 1)));
  if (dp / ep > 1) {
    KP_ASSIGN_OR_RETURN(g.expert_dp, g.dp->Subgroup(Range(g.dp_rank % ep, dp / ep, ep)));
  }
  return g;
}

}  // namespace kp::runtime
