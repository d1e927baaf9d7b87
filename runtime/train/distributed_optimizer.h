// Megatron's distributed optimizer (--distributed-optimizer on), laid out
// as Megatron lays it: each replica group's gradients live in one contiguous
// buffer (the parameters' order, each parameter's gradient a view of it),
// cut into buckets of consecutive parameters of one dtype of at most
// `bucket_bytes` of gradient (a larger parameter alone), each bucket padded
// to a multiple of the group's D ranks. Rank d owns the d-th of the D equal
// parts of every bucket, and AdamW's moments exist only for what it owns.
// The gradients are reduce-scattered bucket by bucket in place
// (Communicator::ReduceScatterSum: each part summed into its owner alone),
// the gradient norm is taken from the owned parts, and after the update the
// parameters are all-gathered bucket by bucket (through one bucket of
// staging in the parameters' dtype), so every rank holds the whole updated
// parameters again. The dense parameters' group is DP (x CP), the routed
// experts' expert-DP (replica_groups in data_parallel.h).
//
// The update is AdamW's element by element and a reduction to one rank sums
// in the order an all-reduce does (of two ranks, one order), so on the CPU
// the parameters equal those of the whole optimizer but for the clipping
// coefficient, whose norm adds the owned parts' squares (a rounding apart).
//
// Megatron's mixed precision: a bf16 parameter's owned elements get an fp32
// master copy, which the optimizer updates (its gradient: the parameter's
// fp32 main gradient in the buffer); StoreMasters rounds the masters into
// the parameter, and Gather all-gathers the bf16 elements. fp32 parameters
// are their own masters. With a group of one rank this is the whole
// optimizer with fp32 masters.
// Thread-safety: one thread.
#ifndef KIMI_PLAN_RUNTIME_TRAIN_DISTRIBUTED_OPTIMIZER_H_
#define KIMI_PLAN_RUNTIME_TRAIN_DISTRIBUTED_OPTIMIZER_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "common/status.h"
#include "runtime/comm/communicator.h"

namespace kp::runtime {

/// Parameters and the replica group whose ranks hold the same values (null
/// or of one rank: nothing is sharded).
struct ReplicatedParameters {
  std::vector<torch::Tensor> params;
  Communicator* group = nullptr;
};

class ParameterShards {
 public:
  /// Every parameter must be contiguous, fp32 or bf16 (fp64 in tests), all of
  /// one device. `bucket_bytes`: the most gradient bytes in one bucket (a
  /// larger parameter is a bucket alone).
  explicit ParameterShards(std::vector<ReplicatedParameters> groups,
                           std::int64_t bucket_bytes = kGradientBucketBytes);

  /// This rank's owned elements of each parameter, as the tensors the
  /// optimizer updates: views of the parameter's storage, or for a bf16
  /// parameter its fp32 master copy (none for a parameter it owns nothing
  /// of), and whether the whole parameter is a matrix (the weight-decayed
  /// ones). A parameter lies in one bucket, so it has one slice at most.
  struct Slice {
    torch::Tensor values;
    torch::Tensor stored;  ///< the owned elements in the parameter (values itself but for bf16)
    int group = 0;
    int param = 0;
    std::int64_t offset = 0;  ///< in the parameter's elements
    bool matrix = false;
  };
  const std::vector<Slice>& slices() const { return slices_; }
  /// The slice of `param` (one of the groups' parameters, the same tensor)
  /// this rank owns, or null when it owns none of it.
  const Slice* SliceOf(const torch::Tensor& param) const;
  /// The parameter `slice` (one of slices()) is part of.
  const torch::Tensor& ParameterOf(const Slice& slice) const { return groups_[slice.group].params[slice.param]; }
  /// Whether `param`'s group shards it over more than one rank.
  bool ShardsParameter(const torch::Tensor& param) const;
  /// Elements this rank owns (the optimizer's state covers these alone).
  std::int64_t owned_elements() const;
  /// Buckets of group `group` (each one reduce-scatter and one all-gather).
  int buckets(int group) const { return static_cast<int>(buckets_[group].size()); }

  /// Points every parameter's gradient at its place in its group's gradient
  /// buffer (fp32; fp64 for fp64 parameters), allocated on the first call,
  /// and zeroes the buffer. Call before the backward, which then
  /// accumulates into it in place, as into Megatron's grad buffer.
  void PrepareGradients();

  /// Sums each bucket over its group into the owners of its parts (in
  /// place in the buffer) and divides the owned parts by `divisor` (the
  /// replicas' mean); the parts a rank does not own are left unspecified. A
  /// gradient that is not its buffer view (made or replaced since
  /// PrepareGradients) is copied into the buffer first, a missing one counts
  /// as zeros. IoError from the communicator.
  Status ReduceScatterGradients(int divisor);
  /// Whether a group of more than one rank shards its parameters (only
  /// then do the gradients need ReduceScatterGradients).
  bool sharded() const;
  /// This rank's owned part of each gradient of group `group`, in the
  /// group's parameter order (undefined where it owns none of a parameter
  /// or the parameter has no gradient). One pass over the slices.
  std::vector<torch::Tensor> OwnedGradients(int group) const;
  /// Points each slice's gradient at its part of the parameter's gradient
  /// (none where the parameter has none: AdamW leaves it alone).
  void BindGradients();
  /// Drops the slices' gradients (the buffer stays for the next step).
  void ReleaseGradients();
  /// Rounds every fp32 master into its bf16 parameter (after the update,
  /// before Gather); nothing for fp32 parameters.
  void StoreMasters();
  /// Elements that have an fp32 master copy beside their parameter.
  std::int64_t master_elements() const;
  /// All-gathers every bucket's owned parts into every rank's parameters.
  /// IoError from the communicator.
  Status Gather();

 private:
  /// Consecutive parameters [first, last) at [begin, begin + size) of the
  /// group's buffer; size is a multiple of the group's ranks.
  struct Bucket {
    std::int64_t begin = 0, size = 0;
    int first = 0, last = 0;
  };
  void LayOut(int g, std::int64_t bucket_bytes);
  /// This rank's part of bucket `b`, in buffer elements.
  std::pair<std::int64_t, std::int64_t> Owned(int g, const Bucket& b) const;
  void EnsureGradientBuffer(int g);
  torch::Tensor GradientView(int g, int i) const;

  std::vector<ReplicatedParameters> groups_;
  std::vector<std::vector<std::int64_t>> starts_;  ///< per group: each parameter's first element in the buffer
  std::vector<std::vector<Bucket>> buckets_;
  std::vector<std::int64_t> totals_;      ///< per group: the buffer's elements, padding included
  std::vector<torch::Tensor> gradients_;  ///< per group: the gradient buffer, once made
  std::vector<Slice> slices_;
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TRAIN_DISTRIBUTED_OPTIMIZER_H_
