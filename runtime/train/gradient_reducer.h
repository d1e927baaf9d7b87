// The gradient reducer: after the schedule executor's backwards, this
// rank's gradients made whole and averaged (the TP-partial sums over TP,
// the dense ones averaged over DP (x CP), the experts' over expert-DP, or
// with the distributed optimizer reduce-scattered to their owners), then
// the total norm and the step's loss, each reduced exactly and in a fixed
// order so that every layout gives the single process's numbers
// (pipeline_runtime.h, "Numerics"). It owns the list of this rank's
// trainable parameters and where each sits in the whole model's order.
// Internal to runtime/train/. Thread-safety: one thread.
#ifndef KIMI_PLAN_RUNTIME_TRAIN_GRADIENT_REDUCER_H_
#define KIMI_PLAN_RUNTIME_TRAIN_GRADIENT_REDUCER_H_

#include <vector>

#include <torch/torch.h>

#include "common/status.h"
#include "runtime/train/data_parallel.h"
#include "runtime/train/distributed_optimizer.h"
#include "runtime/train/pipeline_context.h"

namespace kp::runtime {

class GradientReducer {
 public:
  /// Reads the context's trainable parameters (stage order), split into
  /// dense and expert ones for the replicas' average, with the EP and TP
  /// shards marked for the norm; then learns from every pipeline rank how
  /// many each stage has, so that a parameter's place in the whole model's
  /// order is known everywhere. Collective over the pipeline group.
  Status Collect(const PipelineContext& ctx);

  /// The TP-partial gradients summed over TP (tensor_parallel.h), then the
  /// replicas' averaged; with `shards` sharded, each rank gets the average
  /// of its owned parts alone. May be null.
  Status Reduce(const PipelineContext& ctx, ParameterShards* shards);
  /// The total L2 norm, the same on every rank: each parameter's square
  /// summed over the groups that split it, placed in its slot of the whole
  /// model's order and summed in that order (SumInOrder).
  Result<double> GradNorm(const PipelineContext& ctx, const ParameterShards* shards) const;
  /// The step's loss from the last stage's micro-batch `losses`: their sum
  /// (their mean when not `own_loss`), averaged over the replicas.
  Result<double> Loss(const PipelineContext& ctx, const torch::Tensor& losses, bool own_loss) const;

  const std::vector<torch::Tensor>& params() const { return params_; }
  const SplitParameters& split() const { return split_; }

 private:
  Status ExchangeLayout(const PipelineContext& ctx);
  Result<std::vector<double>> Squares(const PipelineContext& ctx, const ParameterShards* shards) const;
  Status SumSquaresOver(const PipelineContext& ctx, Communicator* group, const std::vector<int>& at,
                        std::vector<double>& squares) const;

  std::vector<torch::Tensor> params_;  // this rank's, in stage order
  std::vector<int> slots_;             // each param's index in the whole model's order
  int global_params_ = 0;
  SplitParameters split_;              // params as dense / expert, for the DP average
  std::vector<int> expert_at_;         // indices into params of the sharded experts' banks
  std::vector<int> tp_shard_at_;       // indices into params of the TP shards
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TRAIN_GRADIENT_REDUCER_H_
