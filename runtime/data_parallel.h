// Data parallelism over Communicators: the gradient all-reduce (bucketed,
// averaged), the global gradient norm and its clipping, the router-load sum.
// Every rank of a data-parallel (DP) group runs the same model on its own
// equal slice of the step's batch; the loss is the mean over the slices.
//
// Layout (Megatron's order, pipeline outermost): world rank = pp_rank * dp +
// dp_rank; a DP group is one pipeline stage's replicas {pp_rank * dp + d},
// a pipeline group one replica's stages {p * dp + dp_rank}; the
// expert-parallel (EP) groups are consecutive blocks of ep DP ranks, and the
// ranks holding the same experts (the expert-DP group) are those of a DP
// group with the same dp_rank % ep (MakeRankGroups).
//
// Reproducibility: the reductions are Communicator::AllReduceSum (fixed
// order), the buckets are fixed by the parameter order, and the norm is
// summed in parameter order, so a rerun gives the same bits. Against a
// single process that accumulates the gradients of the dp slices in turn
// (loss / dp each), dp = 2 is bitwise equal in fp32: the halving is exact
// and a two-term sum is commutative. For dp > 2 the all-reduce adds the
// slices in the ring's order, not 1, 2, 3, ..., so only the rounding of a
// dp-term sum separates them.
// Thread-safety: one thread.
#ifndef KIMI_PLAN_RUNTIME_DATA_PARALLEL_H_
#define KIMI_PLAN_RUNTIME_DATA_PARALLEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "common/status.h"
#include "runtime/communicator.h"

namespace kp::runtime {

class StageModelImpl;

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
  int pp_rank = 0, dp_rank = 0;
  Communicator* pipeline = nullptr;  ///< this replica's stages; the world when dp == 1, null when pp == 1 < dp
  Communicator* dp = nullptr;        ///< this stage's replicas; the world when pp == 1, null when dp == 1 < pp
  std::unique_ptr<Communicator> ep;         ///< ep > 1: ep consecutive ranks of the DP group
  std::unique_ptr<Communicator> expert_dp;  ///< dp / ep > 1: the DP ranks with this dp_rank % ep
  std::vector<std::unique_ptr<Communicator>> owned;
  /// The replicas of the gradient average: experts over expert_dp when ep > 1.
  ReplicaGroups Replicas() const;
};

/// Builds this rank's groups for a world of pp x dp ranks (ep divides dp),
/// in one order on every rank (pipeline, DP, EP, expert-DP) so that c10d's
/// rendezvous of one group never waits on another. IoError from c10d.
Result<RankGroups> MakeRankGroups(Communicator& world, int pp, int dp, int ep);

/// The trainable parameters split into the dense ones (replicated on every
/// DP rank) and the routed experts' banks (sharded over EP), each list in
/// `trainable`'s order.
struct SplitParameters {
  std::vector<torch::Tensor> dense, expert;
  /// For each trainable parameter in order: whether it is an expert bank's.
  std::vector<bool> is_expert;
};
SplitParameters SplitByReplication(StageModelImpl& model, const std::vector<torch::Tensor>& trainable);

/// Sums every gradient over its replica group (dense over dp, experts over
/// expert_dp) in buckets of at most `bucket_bytes`, then divides by dp_size.
/// A parameter without a gradient gets zeros first, so every rank's buckets
/// line up. IoError from the communicator.
Status AverageGradients(const SplitParameters& params, const ReplicaGroups& groups,
                        std::int64_t bucket_bytes = std::int64_t{25} << 20);

/// The global L2 norm of all gradients (the sharded experts' included, their
/// squares summed over EP), then clip_grad_norm_'s scaling by
/// min(1, max_norm / (norm + 1e-6)). Without EP it is exactly
/// torch::nn::utils::clip_grad_norm_ on `trainable`.
Result<double> ClipGradientNorm(const std::vector<torch::Tensor>& trainable, const SplitParameters& params,
                                const ReplicaGroups& groups, double max_norm);

/// Sums every router's load over `dp` so the bias update sees the global
/// batch's routing, identically on every rank.
Status SumRouterLoads(StageModelImpl& model, Communicator* dp);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_DATA_PARALLEL_H_
