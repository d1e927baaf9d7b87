#include "runtime/train/optimizer_step.h"

#include <algorithm>

#include "runtime/train/trainer_internal.h"

namespace kp::runtime {

namespace {

bool HasBf16(const std::vector<torch::Tensor>& params) {
  return std::any_of(params.begin(), params.end(),
                     [](const torch::Tensor& p) { return p.scalar_type() == torch::kBFloat16; });
}

}  // namespace

// Without the distributed optimizer each rank owns all of its shards: they
// are there for the bf16 parameters' fp32 masters alone.
void OptimizerStep::Reset(const PipelineContext& ctx, const GradientReducer& reducer) {
  shards_.reset();
  const TrainConfig& train = ctx.config.train;
  if (!train.distributed_optimizer && !HasBf16(reducer.params())) {
    optimizer_ = std::make_unique<MultiTensorAdamW>(ParamGroups(reducer.params(), train),
                                                    torch::optim::AdamWOptions(train.lr));
    return;
  }
  const ReplicaGroups replicas = ctx.Replicas();
  const bool sharded = train.distributed_optimizer;
  shards_ = std::make_unique<ParameterShards>(std::vector<ReplicatedParameters>{
      {reducer.split().dense, sharded ? replicas.dp : nullptr},
      {reducer.split().expert, sharded ? replicas.expert_dp : nullptr}});
  std::vector<torch::Tensor> decay, no_decay;
  for (const ParameterShards::Slice& s : shards_->slices()) (s.matrix ? decay : no_decay).push_back(s.values);
  optimizer_ = std::make_unique<MultiTensorAdamW>(ParamGroups(decay, no_decay, train),
                                                  torch::optim::AdamWOptions(train.lr));
}

// The gradients stay allocated from step to step and are zeroed, as
// Megatron's gradient buffer is (and as the plan prices them), whichever
// LibTorch's zero_grad would free them. With the shards every gradient is
// a view of its group's contiguous buffer, in place before the backward,
// which accumulates into it: a bf16 parameter's is its fp32 main gradient
// (Megatron's main_grad), and the buckets are reduce-scattered in place.
void OptimizerStep::Prepare(const std::vector<torch::Tensor>& params, double lr) {
  for (auto& group : optimizer_->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  if (shards_) {
    shards_->PrepareGradients();
    return;
  }
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& p : params)
    if (p.grad().defined()) p.mutable_grad().zero_();
}

// Clipping is folded into the update: one pass over the gradients fewer.
Status OptimizerStep::Apply(double grad_norm, double clip) {
  optimizer_->ScaleGradientsInNextStep(ClipScale(grad_norm, clip));
  if (shards_) shards_->BindGradients();
  optimizer_->step();
  if (!shards_) return Status::Ok();
  shards_->StoreMasters();
  shards_->ReleaseGradients();
  return shards_->Gather();
}

Status OptimizerStep::Load(torch::serialize::InputArchive& archive) {
  try {
    optimizer_->load(archive);
  } catch (const c10::Error& e) {
    return Status::InvalidArgument(std::string("the optimizer state does not fit this model: ") +
                                   e.what_without_backtrace());
  }
  return Status::Ok();
}

}  // namespace kp::runtime
