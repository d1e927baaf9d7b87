// The optimizer step: the learning rate of the step, the gradients zeroed
// (or, with the shards, bound as views of each replica group's contiguous
// buffer before the backward), then the clip folded into AdamW's update, and
// with the shards the updated parameters stored back and all-gathered.
// AdamW runs over the whole parameters, or with the distributed optimizer
// over this rank's shards of them; bf16 parameters (Megatron's mixed
// precision) always go through the shards, which keep their fp32 masters.
// Internal to runtime/train/. Thread-safety: one thread.
#ifndef KIMI_PLAN_RUNTIME_TRAIN_OPTIMIZER_STEP_H_
#define KIMI_PLAN_RUNTIME_TRAIN_OPTIMIZER_STEP_H_

#include <memory>

#include <torch/torch.h>

#include "common/status.h"
#include "runtime/train/distributed_optimizer.h"
#include "runtime/train/gradient_reducer.h"
#include "runtime/train/multi_tensor_adamw.h"
#include "runtime/train/pipeline_context.h"

namespace kp::runtime {

class OptimizerStep {
 public:
  /// A new AdamW (and shards) over the reducer's parameters, with the
  /// context's hyper-parameters; the old state goes.
  void Reset(const PipelineContext& ctx, const GradientReducer& reducer);
  /// Before a step's backward: the learning rate, and the gradients zeroed
  /// in place (kept allocated, as Megatron's gradient buffer is) or bound to
  /// the shards' buffers.
  void Prepare(const std::vector<torch::Tensor>& params, double lr);
  /// After the reduction: AdamW with the gradients scaled by the clip
  /// (ClipScale(grad_norm, clip)); with the shards the masters stored, the
  /// gradients released and the parameters all-gathered (IoError when that
  /// fails).
  Status Apply(double grad_norm, double clip);

  /// The shards, or null without them.
  ParameterShards* shards() const { return shards_.get(); }
  /// The AdamW over the parameters (or, with the shards, their owned
  /// slices): its state is read and set by the layout-free save.
  MultiTensorAdamW& adamw() const { return *optimizer_; }
  void Save(torch::serialize::OutputArchive& archive) const { optimizer_->save(archive); }
  /// InvalidArgument when the state does not fit these parameters.
  Status Load(torch::serialize::InputArchive& archive);

 private:
  std::unique_ptr<MultiTensorAdamW> optimizer_;
  std::unique_ptr<ParameterShards> shards_;
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TRAIN_OPTIMIZER_STEP_H_
