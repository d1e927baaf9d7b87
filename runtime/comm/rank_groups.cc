#include "runtime/comm/rank_groups.h"

namespace kp::runtime {

ReplicaGroups RankGroups::Replicas() const {
  Communicator* dense = cp != nullptr ? dp_cp : dp;
  const int dense_size = dense != nullptr ? dense->size() : 1;
  return ReplicaGroups{dense, expert_shards != nullptr ? expert_dp : dense, expert_shards, dense_size};
}

namespace {

std::vector<int> Range(int first, int count, int stride) {
  std::vector<int> v;
  for (int i = 0; i < count; ++i) v.push_back(first + i * stride);
  return v;
}

}  // namespace

Result<RankGroups> MakeRankGroups(Communicator& world, const GroupSizes& n) {
  const int span = n.ep * n.etp, stage_size = n.dp * n.cp * n.tp;
  if (n.pp < 1 || n.dp < 1 || n.ep < 1 || n.tp < 1 || n.etp < 1 || n.cp < 1 || world.size() != n.pp * stage_size ||
      stage_size % span != 0)
    return Status::InvalidArgument("groups: a world of " + std::to_string(world.size()) + " ranks is not pp " +
                                   std::to_string(n.pp) + " x dp " + std::to_string(n.dp) + " x cp " +
                                   std::to_string(n.cp) + " x tp " + std::to_string(n.tp) + " with ep " +
                                   std::to_string(n.ep) + " x etp " + std::to_string(n.etp) +
                                   " dividing tp x cp x dp");
  RankGroups g;
  const int r = world.rank(), stage = r / stage_size * stage_size, x = r - stage;
  g.tp_rank = r % n.tp;
  g.cp_rank = r / n.tp % n.cp;
  g.dp_rank = x / (n.cp * n.tp);
  g.pp_rank = r / stage_size;
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
  KP_RETURN_IF_ERROR(group(r - g.tp_rank, n.tp, 1, &g.tp));
  KP_RETURN_IF_ERROR(group(r - g.cp_rank * n.tp, n.cp, n.tp, &g.cp));
  KP_RETURN_IF_ERROR(group(x, n.pp, stage_size, &g.pipeline));
  KP_RETURN_IF_ERROR(group(stage + g.cp_rank * n.tp + g.tp_rank, n.dp, n.cp * n.tp, &g.dp));
  if (n.cp > 1) KP_RETURN_IF_ERROR(group(stage + g.tp_rank, n.dp * n.cp, n.tp, &g.dp_cp));
  if (span == 1) return g;
  // The expert groups in the stage's numbering x, as world ranks.
  const int block = stage + x / span * span, q = x % span;
  KP_RETURN_IF_ERROR(group(block + q % n.etp, n.ep, n.etp, &g.ep));
  KP_RETURN_IF_ERROR(group(block + q / n.etp * n.etp, n.etp, 1, &g.etp));
  if (n.ep == 1 || n.etp == 1) {
    g.expert_shards = n.ep > 1 ? g.ep : g.etp;
  } else {
    KP_RETURN_IF_ERROR(group(block, span, 1, &g.expert_shards));
  }
  KP_RETURN_IF_ERROR(group(stage + q, stage_size / span, span, &g.expert_dp));
  return g;
}

}  // namespace kp::runtime
