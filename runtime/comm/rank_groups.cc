#include "runtime/comm/rank_groups.h"

namespace kp::runtime {

ReplicaGroups RankGroups::Replicas() const {
  const int dp_size = dp != nullptr ? dp->size() : 1;
  return ReplicaGroups{dp, expert_shards != nullptr ? expert_dp : dp, expert_shards, dp_size};
}

namespace {

std::vector<int> Range(int first, int count, int stride) {
  std::vector<int> v;
  for (int i = 0; i < count; ++i) v.push_back(first + i * stride);
  return v;
}

}  // namespace

Result<RankGroups> MakeRankGroups(Communicator& world, const GroupSizes& n) {
  const int span = n.ep * n.etp;
  if (n.pp < 1 || n.dp < 1 || n.ep < 1 || n.tp < 1 || n.etp < 1 || world.size() != n.pp * n.dp * n.tp ||
      (n.tp * n.dp) % span != 0)
    return Status::InvalidArgument("groups: a world of " + std::to_string(world.size()) + " ranks is not pp " +
                                   std::to_string(n.pp) + " x dp " + std::to_string(n.dp) + " x tp " +
                                   std::to_string(n.tp) + " with ep " + std::to_string(n.ep) + " x etp " +
                                   std::to_string(n.etp) + " dividing tp x dp");
  RankGroups g;
  const int replica = world.rank() / n.tp;  // pp_rank * dp + dp_rank
  g.tp_rank = world.rank() % n.tp;
  g.pp_rank = replica / n.dp;
  g.dp_rank = replica % n.dp;
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
  KP_RETURN_IF_ERROR(group(replica * n.tp, n.tp, 1, &g.tp));
  KP_RETURN_IF_ERROR(group(g.dp_rank * n.tp + g.tp_rank, n.pp, n.dp * n.tp, &g.pipeline));
  KP_RETURN_IF_ERROR(group(g.pp_rank * n.dp * n.tp + g.tp_rank, n.dp, n.tp, &g.dp));
  if (span == 1) return g;
  // The expert groups in the stage's numbering x, as world ranks.
  const int stage = g.pp_rank * n.dp * n.tp, x = world.rank() - stage;
  const int block = stage + x / span * span, q = x % span;
  KP_RETURN_IF_ERROR(group(block + q % n.etp, n.ep, n.etp, &g.ep));
  KP_RETURN_IF_ERROR(group(block + q / n.etp * n.etp, n.etp, 1, &g.etp));
  if (n.ep == 1 || n.etp == 1) {
    g.expert_shards = n.ep > 1 ? g.ep : g.etp;
  } else {
    KP_RETURN_IF_ERROR(group(block, span, 1, &g.expert_shards));
  }
  KP_RETURN_IF_ERROR(group(stage + q, n.tp * n.dp / span, span, &g.expert_dp));
  return g;
}

}  // namespace kp::runtime
