// Tensor and sequence parallelism's collectives as autograd nodes (issue 16's
// foundation), after Megatron-LM's mappings: each forward collective has the
// conjugate one as its backward, so a layer split over a TP group gives the
// unsplit layer's outputs and gradients.
//
//   CopyToTensorParallel       forward: identity      backward: all-reduce
//   ReduceFromTensorParallel   forward: all-reduce    backward: identity
//   GatherSequence             forward: all-gather    backward: reduce-scatter
//   ScatterSequence            forward: reduce-scatter backward: all-gather
//   SplitSequence              forward: own shard      backward: all-gather
//
// Sums are in rank order 0 .. n-1 on every rank (the Communicator's
// AllReduceSum contract; the reduce-scatter adds the received shards in rank
// order), so results are reproducible run to run. A failed collective
// inside forward or backward throws CommunicationError (expert_parallel.h),
// which the trainer turns back into a Status. The communicator must outlive
// the backward.
//
// Also here: the column- and row-parallel pieces of a dense SwiGLU, the
// first layer split this way (ShardSwiGlu, TensorParallelSwiGlu).
//
// Thread-safety: as the communicator's (one thread).
#ifndef KIMI_PLAN_RUNTIME_MODEL_TENSOR_PARALLEL_H_
#define KIMI_PLAN_RUNTIME_MODEL_TENSOR_PARALLEL_H_

#include <cstdint>

#include <torch/torch.h>

#include "common/status.h"
#include "runtime/comm/communicator.h"

namespace kp::runtime {

class SwiGluImpl;

/// x, with the gradient summed over `tp` in backward.
torch::Tensor CopyToTensorParallel(Communicator& tp, const torch::Tensor& x);
/// x summed over `tp`; the gradient passes through unchanged.
torch::Tensor ReduceFromTensorParallel(Communicator& tp, const torch::Tensor& x);
/// Every rank's x concatenated along `dim` in rank order (equal shapes).
torch::Tensor GatherSequence(Communicator& tp, const torch::Tensor& x, std::int64_t dim);
/// x summed over `tp`, keeping this rank's shard of `dim` (which tp's size
/// divides): shard r is rows [r L / n, (r + 1) L / n).
torch::Tensor ScatterSequence(Communicator& tp, const torch::Tensor& x, std::int64_t dim);
/// This rank's shard of x along `dim` (which tp's size divides).
torch::Tensor SplitSequence(Communicator& tp, const torch::Tensor& x, std::int64_t dim);

/// Every rank's x concatenated along `dim`, without autograd.
/// Errors: the communicator's.
Result<torch::Tensor> AllGather(Communicator& c, const torch::Tensor& x, std::int64_t dim);
/// x summed over `c` in rank order, this rank's shard of `dim` kept, without
/// autograd. Errors: InvalidArgument when the size does not divide dim's
/// length; the communicator's.
Result<torch::Tensor> ReduceScatter(Communicator& c, const torch::Tensor& x, std::int64_t dim);

/// Per-row cross entropy [N] (in the logits' dtype promoted to at least
/// fp32) of logits split by vocabulary over `tp`: this rank holds columns
/// [r V / n, (r + 1) V / n) of the [N, V] logits as `local` [N, V / n], and
/// `targets` [N] (int64) are global ids (-100: ignored, loss 0). Every rank
/// gets every row's loss; the full logits are never gathered (Megatron's
/// vocabulary-parallel cross entropy: the row maxima, the sums of
/// exponentials and the target logits are reduced instead). Differentiable
/// in `local`; the backward needs no communication.
torch::Tensor VocabParallelCrossEntropy(Communicator& tp, const torch::Tensor& local, const torch::Tensor& targets);

/// The rows of `tokens` (int64, any shape) in an embedding table split by
/// vocabulary over `tp`: this rank holds rows [r V / n, (r + 1) V / n) as
/// `local_weight`; each rank looks up the ids it holds (zeros for the
/// rest) and the partial tables are summed over the group. Differentiable
/// in `local_weight`.
torch::Tensor VocabParallelEmbedding(Communicator& tp, const torch::Tensor& local_weight, const torch::Tensor& tokens);

/// Keeps this rank's part of a SwiGLU's hidden units: rows [r F / n,
/// (r + 1) F / n) of gate and up, the same columns of down (Megatron's
/// column- then row-parallel split). InvalidArgument ("--tp: ...") when the
/// TP size does not divide the hidden size or the layer has LoRA adapters.
Status ShardSwiGlu(SwiGluImpl& ffn, const Communicator& tp);

/// A SwiGLU sharded by ShardSwiGlu, over `tp`: the input copied to the
/// group, the down projection's partial sums reduced. Equals the unsharded
/// layer's forward, and its gradients (the input's whole, the weights' as
/// the shards of the whole), up to the order of the final sum.
torch::Tensor TensorParallelSwiGlu(Communicator& tp, SwiGluImpl& ffn, const torch::Tensor& x);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_MODEL_TENSOR_PARALLEL_H_
