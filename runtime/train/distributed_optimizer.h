// Megatron's distributed optimizer (--distributed-optimizer on): each
// replica group's parameters laid end to end in their order, rank d of the
// group's D owning the elements [d * ceil(N / D), (d + 1) * ceil(N / D)), and
// AdamW's moments only for what it owns; after the update each rank's owned
// elements are broadcast to the others, so every rank holds the whole
// updated parameters again. The gradients are reduce-scattered before it:
// each part summed into the rank that owns it alone (ReduceScatterGradients),
// and the gradient norm is taken from the owned parts. The dense parameters' group is DP (x CP), the
// routed experts' expert-DP (replica_groups in data_parallel.h).
//
// The update is AdamW's element by element and a reduction to one rank sums
// in the order an all-reduce does (of two ranks, one order), so on the CPU
// the parameters equal those of the whole optimizer but for the clipping
// coefficient, whose norm adds the owned parts' squares (a rounding apart).
//
// Megatron's mixed precision: a bf16 parameter's owned elements get an fp32
// master copy, which the optimizer updates (its gradient: the parameter's
// fp32 main gradient, see PipelineRank); StoreMasters rounds the masters
// into the parameter, and Gather broadcasts the bf16 elements. fp32
// parameters are their own masters. With a group of one rank this is the
// whole optimizer with fp32 masters.
// Thread-safety: one thread.
#ifndef KIMI_PLAN_RUNTIME_TRAIN_DISTRIBUTED_OPTIMIZER_H_
#define KIMI_PLAN_RUNTIME_TRAIN_DISTRIBUTED_OPTIMIZER_H_

#include <cstdint>
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
  /// Every parameter must be contiguous, fp32 or bf16 (fp64 in tests).
  explicit ParameterShards(std::vector<ReplicatedParameters> groups);

  /// This rank's owned elements of each parameter, as the tensors the
  /// optimizer updates: views of the parameter's storage, or for a bf16
  /// parameter its fp32 master copy (none for a parameter it owns nothing
  /// of), and whether the whole parameter is a matrix (the weight-decayed
  /// ones).
  struct Slice {
    torch::Tensor values;
    torch::Tensor stored;  ///< the owned elements in the parameter (values itself but for bf16)
    int group = 0;
    int param = 0;
    std::int64_t offset = 0;  ///< in the parameter's elements
    bool matrix = false;
  };
  const std::vector<Slice>& slices() const { return slices_; }
  /// Elements this rank owns (the optimizer's state covers these alone).
  std::int64_t owned_elements() const;

  /// Sums each parameter's gradient part over its group into the part's
  /// owner and divides the owned parts by `divisor` (the replicas' mean);
  /// the parts a rank does not own are left unspecified. Gradients not yet
  /// made become zeros first. One reduction per owned part, no buffer (the
  /// gather's layout). IoError from the communicator.
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
  /// Drops the slices' gradients: a view keeps its whole parameter's
  /// gradient alive, which would then outlive the step.
  void ReleaseGradients();
  /// Rounds every fp32 master into its bf16 parameter (after the update,
  /// before Gather); nothing for fp32 parameters.
  void StoreMasters();
  /// Elements that have an fp32 master copy beside their parameter.
  std::int64_t master_elements() const;
  /// Broadcasts every rank's owned elements to the rest of its group,
  /// straight into the parameters (one broadcast per parameter part, no
  /// buffer). IoError from the communicator.
  Status Gather();

 private:
  struct Range {
    std::int64_t begin = 0, end = 0;  ///< in the group's elements laid end to end
  };
  Range Owned(int group, int rank) const;
  /// Calls f(rank, param, part) for each owner's part of each parameter of
  /// group `g`, owners in rank order (the order every rank's collectives
  /// must follow); `part` views the flat elements of `of(param)`.
  template <typename F, typename Of>
  Status ForEachOwnedPart(int g, const Of& of, const F& f) const;

  std::vector<ReplicatedParameters> groups_;
  std::vector<std::vector<std::int64_t>> starts_;  ///< per group: each parameter's first element
  std::vector<std::int64_t> totals_;
  std::vector<Slice> slices_;
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TRAIN_DISTRIBUTED_OPTIMIZER_H_
