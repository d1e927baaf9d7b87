// Data parallelism over Communicators: the gradient all-reduce (bucketed,
// averaged), the global gradient norm and its clipping, the router-load sum.
// Every rank of a data-parallel (DP) group runs the same model on its own
// equal slice of the step's batch; the loss is the mean over the slices.
//
// The groups are those of runtime/comm/rank_groups.h.
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
#ifndef KIMI_PLAN_RUNTIME_TRAIN_DATA_PARALLEL_H_
#define KIMI_PLAN_RUNTIME_TRAIN_DATA_PARALLEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "common/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/rank_groups.h"

namespace kp::runtime {

class StageModelImpl;

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
                        std::int64_t bucket_bytes = kGradientBucketBytes);

/// The global L2 norm of all gradients (the sharded experts' included, their
/// squares summed over EP), then clip_grad_norm_'s scaling by
/// min(1, max_norm / (norm + 1e-6)). Without EP it is exactly
/// torch::nn::utils::clip_grad_norm_ on `trainable`.
Result<double> ClipGradientNorm(const std::vector<torch::Tensor>& trainable, const SplitParameters& params,
                                const ReplicaGroups& groups, double max_norm);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TRAIN_DATA_PARALLEL_H_
