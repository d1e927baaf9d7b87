// The communicator groups of one rank under the parallel layout of a run.
//
// Layout (Megatron's order, pipeline outermost, tensor parallelism
// innermost, context parallelism next): world rank = ((pp_rank * dp +
// dp_rank) * cp + cp_rank) * tp + tp_rank. A TP group is tp consecutive
// ranks; a CP group the cp ranks of one replica's stage with the same
// tp_rank (stride tp); a DP group is one pipeline stage's replicas with the
// same cp_rank and tp_rank (stride cp tp); the DP x CP group all of a
// stage's ranks with the same tp_rank (the dense gradients' replicas); a
// pipeline group one replica's stages (stride dp cp tp). With tp = cp = 1
// this is world rank = pp_rank * dp + dp_rank.
//
// Experts (Megatron's MoE folding): the tp x cp x dp ranks of a stage,
// numbered x = (dp_rank * cp + cp_rank) * tp + tp_rank (world rank -
// pp_rank * dp * cp * tp), fall into
// blocks of ep x etp consecutive x, each block holding every expert once.
// Inside a block, with q = x % (ep etp), the ETP group (one expert's FFN
// split) is the etp consecutive x with the same q / etp, the EP group (the
// experts split) the ep x with the same q % etp (stride etp), and the
// expert-DP group (the same expert shard) the x with the same q in every
// block (stride ep x etp).
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
  Communicator* dp = nullptr;         ///< the dense parameters' replicas (DP, or DP x CP)
  Communicator* expert_dp = nullptr;  ///< the ranks holding this rank's experts
  Communicator* expert_shards = nullptr;  ///< the ep x etp block: each expert bank's shards
  int dp_size = 1;                    ///< the divisor of the averaged gradient
};

/// One rank's groups under the layout above. Raw pointers may point at the
/// world (owned by the caller) or into `owned`; null: a group of one.
struct RankGroups {
  int pp_rank = 0, dp_rank = 0, cp_rank = 0, tp_rank = 0;
  Communicator* tp = nullptr;        ///< tp > 1: this rank's TP group; the world when it is all of it
  Communicator* cp = nullptr;        ///< cp > 1: this rank's CP group
  Communicator* dp_cp = nullptr;     ///< cp > 1: the stage's DP x CP ranks with this tp_rank
  Communicator* pipeline = nullptr;  ///< this replica's stages; the world when dp == 1, null when pp == 1 < dp
  Communicator* dp = nullptr;        ///< this stage's replicas; the world when pp == 1, null when dp == 1 < pp
  Communicator* ep = nullptr;             ///< ep > 1: the experts of a layer split over it (token all-to-all)
  Communicator* etp = nullptr;            ///< etp > 1: each of this rank's experts' FFN split over it
  Communicator* expert_shards = nullptr;  ///< ep x etp > 1: the block, ep or etp when it is one of them
  Communicator* expert_dp = nullptr;      ///< tp x cp x dp > ep x etp: the ranks holding this rank's expert shards
  std::vector<std::unique_ptr<Communicator>> owned;
  /// The replicas of the gradient average: experts over expert_dp when they
  /// are split (ep x etp > 1), else over dp like the rest.
  ReplicaGroups Replicas() const;
};

/// The sizes of a layout; ep x etp divides tp x cp x dp.
struct GroupSizes {
  int pp = 1, dp = 1, tp = 1, ep = 1, etp = 1, cp = 1;
};

/// Builds this rank's groups for a world of pp x dp x cp x tp ranks, in one
/// order on every rank (TP, CP, pipeline, DP, DP x CP, EP, ETP, expert shards,
/// expert-DP) so that c10d's rendezvous of one group never waits on
/// another. InvalidArgument when the sizes do not make the world; IoError
/// from c10d.
Result<RankGroups> MakeRankGroups(Communicator& world, const GroupSizes& sizes);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_COMM_RANK_GROUPS_H_
