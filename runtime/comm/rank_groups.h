// The communicator groups of one rank under the parallel layout of a run.
//
// Layout (Megatron's order, pipeline outermost, tensor parallelism
// innermost): world rank = (pp_rank * dp + dp_rank) * tp + tp_rank. A TP
// group is tp consecutive ranks; a DP group is one pipeline stage's replicas
// with the same tp_rank, {(pp_rank * dp + d) * tp + tp_rank}; a pipeline
// group one replica's stages, {(p * dp + dp_rank) * tp + tp_rank}; the
// expert-parallel (EP) groups are consecutive blocks of ep DP ranks, and the
// ranks holding the same experts (the expert-DP group) are those of a DP
// group with the same dp_rank % ep (MakeRankGroups). With tp = 1 this is
// world rank = pp_rank * dp + dp_rank.
//
// Thread-safety: one thread.
#ifndef KIMI_PLAN_RUNTIME_COMM_RANK_GROUPS_H_
#define KIMI_PLAN_RUNTIME_COMM_RANK_GROUPS_H_

#include <memory>
#include <vector>

#include "common/status.h"
#include "runtime/comm/communicator.h"

namespace kp::runtime {

/// Which groups replicate which parameters; a null group means a group of one.
struct ReplicaGroups {
  Communicator* dp = nullptr;         ///< every DP rank: the dense parameters' replicas
  Communicator* expert_dp = nullptr;  ///< the ranks holding this rank's experts
  Communicator* ep = nullptr;         ///< the EP group: the other experts of a layer
  int dp_size = 1;                    ///< the divisor of the averaged gradient
};

/// One rank's groups under the layout above. Raw pointers may point at the
/// world (owned by the caller) or into `owned`; null: a group of one.
struct RankGroups {
  int pp_rank = 0, dp_rank = 0, tp_rank = 0;
  Communicator* tp = nullptr;        ///< tp > 1: this rank's TP group; the world when it is all of it
  Communicator* pipeline = nullptr;  ///< this replica's stages; the world when dp == 1, null when pp == 1 < dp
  Communicator* dp = nullptr;        ///< this stage's replicas; the world when pp == 1, null when dp == 1 < pp
  std::unique_ptr<Communicator> ep;         ///< ep > 1: ep consecutive ranks of the DP group
  std::unique_ptr<Communicator> expert_dp;  ///< dp / ep > 1: the DP ranks with this dp_rank % ep
  std::vector<std::unique_ptr<Communicator>> owned;
  /// The replicas of the gradient average: experts over expert_dp when ep > 1.
  ReplicaGroups Replicas() const;
};

/// Builds this rank's groups for a world of pp x dp x tp ranks (ep divides
/// dp), in one order on every rank (TP, pipeline, DP, EP, expert-DP) so
/// that c10d's rendezvous of one group never waits on another.
/// InvalidArgument when the sizes do not make the world; IoError from c10d.
Result<RankGroups> MakeRankGroups(Communicator& world, int pp, int dp, int ep, int tp = 1);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_COMM_RANK_GROUPS_H_
