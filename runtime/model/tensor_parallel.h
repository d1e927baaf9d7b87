// Tensor and sequence parallelism (issue 16). The collectives are autograd
// nodes after Megatron-LM's mappings: each forward collective has the
// conjugate one as its backward, so a layer split over a TP group gives the
// unsplit layer's outputs and gradients.
//
//   CopyToTensorParallel       forward: identity      backward: all-reduce
//   ReduceFromTensorParallel   forward: all-reduce    backward: identity
//   GatherSequence             forward: all-gather    backward: reduce-scatter
//   ScatterSequence            forward: reduce-scatter backward: all-gather
//   SplitSequence              forward: own shard      backward: all-gather
//
// A TensorParallelRegion applies them at the edges of a split layer, and
// ShardTensorParallel splits a whole model (docs/runtime.md §19):
//   * attention (KDA, MLA, MHA) by heads: the column-split projections read
//     the entered input, the output projection is row-split and its partial
//     sums leave the region. What every head shares is computed outside the
//     region on every rank and enters it afterwards: MLA's q and kv
//     down-projections with their norms (the latent, and the raw rotary key,
//     enter; RoPE runs inside on the whole sequence), KDA's low-rank forget
//     and output gates' first maps. KDA's gated-norm weight is shared by the
//     heads and used inside, so its gradient is a partial sum.
//   * dense SwiGLU and a MoE's shared experts: column then row.
//   * routed experts (ETP is separate), routers, LatentMoE's projections,
//     norms and depth reads: not split; they run on what the rank holds
//     (the whole sequence, or its shard).
//   * embedding and LM head by vocabulary; the loss by the vocabulary-
//     parallel cross entropy (the logits are never gathered).
// Without sequence parallelism the residual stream is whole on every rank;
// with it, each rank holds tokens [r T / n, (r + 1) T / n) of it and the
// region's edges gather and reduce-scatter along the sequence instead.
//
// Sums are in rank order 0 .. n-1 on every rank (the Communicator's
// AllReduceSum contract; the reduce-scatter adds the received shards in rank
// order), so results are reproducible run to run. A failed collective
// inside forward or backward throws CommunicationError (communicator.h),
// which the trainer turns back into a Status. The communicator must outlive
// the backward.
//
// Thread-safety: as the communicator's (one thread).
#ifndef KIMI_PLAN_RUNTIME_MODEL_TENSOR_PARALLEL_H_
#define KIMI_PLAN_RUNTIME_MODEL_TENSOR_PARALLEL_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/status.h"
#include "runtime/comm/communicator.h"
#include "specs/model_spec.h"

namespace kp::runtime {

class SwiGluImpl;
class StageModelImpl;

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

/// Where a layer split over a TP group meets the unsplit model (Megatron's
/// f and g). Default-constructed (or over one rank) every call is the
/// identity, so a layer reads the same with and without TP.
class TensorParallelRegion {
 public:
  TensorParallelRegion() = default;
  /// `tp` not owned; null means no TP.
  TensorParallelRegion(Communicator* tp, bool sequence_parallel);
  bool active() const { return tp_ != nullptr && tp_->size() > 1; }
  bool sequence_parallel() const { return active() && sequence_parallel_; }
  int size() const { return active() ? tp_->size() : 1; }
  int rank() const { return active() ? tp_->rank() : 0; }
  Communicator& group() const { return *tp_; }  ///< requires active()
  /// x [B, T_local, ...] as the region's input [B, T, ...], the same on
  /// every rank: x itself (its gradient summed over the group) without SP,
  /// the shards gathered along dim 1 (the gradient reduce-scattered) with SP.
  torch::Tensor Enter(const torch::Tensor& x) const;
  /// Every rank's partial sums [B, T, ...] out of the region: their sum,
  /// or with SP this rank's sequence shard of it.
  torch::Tensor Exit(const torch::Tensor& partial) const;

 private:
  Communicator* tp_ = nullptr;
  bool sequence_parallel_ = false;
};

/// A parameter kept as a slice of the whole model's: [first, first + count)
/// of dimension `dim`, whose whole length is `whole`.
struct ParameterShard {
  std::int64_t dim = 0, first = 0, count = 0, whole = 0;
};

/// What a TP split did to a model's parameters, by name.
struct TensorParallelSplit {
  /// The sharded parameters: each rank's slices tile the whole.
  std::map<std::string, ParameterShard> shards;
  /// The whole parameters whose gradient on a rank is that rank's part of
  /// the sum over the group (used on its heads or its sequence shard only);
  /// ReduceTensorParallelGradients sums them.
  std::vector<std::string> partial;
  /// Keeps [first, first + count) of `param`'s `dim` in place (the name and
  /// object stay) and records it as `name`.
  void Keep(const std::string& name, torch::Tensor& param, std::int64_t dim, std::int64_t first,
            std::int64_t count);
  /// Keep of the region's rank's equal share of `dim`: [r L / n, (r + 1) L / n).
  void KeepShare(const std::string& name, torch::Tensor& param, std::int64_t dim, const TensorParallelRegion& region);
  /// The entries of `part` with `prefix` before each name.
  void Merge(const std::string& prefix, const TensorParallelSplit& part);
};

/// Whether a TP group of `tp` ranks splits `spec` evenly: every attention
/// layer's heads (and an MHA layer's key-value heads), the dense FFNs'
/// hidden units, the vocabulary, and with SP the sequence `seq_len`.
/// InvalidArgument naming --tp (or --sequence-parallel) and what does not
/// split; checked by the launcher before any rank starts, and again by
/// ShardTensorParallel.
Status CheckTensorParallelSplit(const ModelSpec& spec, int tp, bool sequence_parallel, std::int64_t seq_len);

/// Splits `model` over the TP group `tp` (the layout in this file's
/// comment; call before the optimizer is built, once) and runs it through
/// that group from now on. InvalidArgument naming --tp when the heads, a
/// dense FFN's hidden units or the vocabulary do not split evenly or LoRA is
/// on, and naming --sequence-parallel when the sequence `seq_len` does not.
Result<TensorParallelSplit> ShardTensorParallel(StageModelImpl& model, Communicator& tp, bool sequence_parallel,
                                                std::int64_t seq_len);

/// Sums over `tp`, in place, the gradients `split` lists as partial (one
/// flat all-reduce), and with SP the routers' token counts. Call after the
/// backward of every micro-batch and before clipping.
Status ReduceTensorParallelGradients(Communicator& tp, StageModelImpl& model, const TensorParallelSplit& split,
                                     bool sequence_parallel);

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

/// The rows of `tokens` (int64 [B, T]) in an embedding table split by
/// vocabulary over the region's group: this rank holds rows [r V / n,
/// (r + 1) V / n) as `local_weight`; each rank looks up the ids it holds
/// (zeros for the rest) and the partial rows leave the region (summed, or
/// with SP reduce-scattered to this rank's sequence shard).
/// Differentiable in `local_weight`.
torch::Tensor VocabParallelEmbedding(const TensorParallelRegion& region, const torch::Tensor& local_weight,
                                     const torch::Tensor& tokens);

/// Keeps this rank's part of a SwiGLU's hidden units, rows [r F / n,
/// (r + 1) F / n) of gate and up and the same columns of down (Megatron's
/// column- then row-parallel split), records them in `split` and runs the
/// layer through `region` from now on: its Mix then equals the unsharded
/// layer's, and so do its gradients (the input's whole, the weights' as the
/// shards of the whole), up to the order of the final sum. InvalidArgument
/// ("--tp: ...") when the TP size does not divide the hidden size or the
/// layer has LoRA adapters.
Status ShardSwiGlu(SwiGluImpl& ffn, const TensorParallelRegion& region, TensorParallelSplit* split);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_MODEL_TENSOR_PARALLEL_H_
