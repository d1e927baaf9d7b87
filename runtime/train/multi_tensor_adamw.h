// AdamW as a few multi-tensor (foreach) operations per parameter group
// instead of ~8 kernels per parameter: the same update, state and
// checkpoint format as torch::optim::AdamW, whose step it replaces.
//
// Not thread-safe (as any optimizer).
#ifndef KIMI_PLAN_RUNTIME_TRAIN_MULTI_TENSOR_ADAMW_H_
#define KIMI_PLAN_RUNTIME_TRAIN_MULTI_TENSOR_ADAMW_H_

#include <vector>

#include <torch/torch.h>

namespace kp::runtime {

/// torch::optim::AdamW with step() over lists of tensors. Per parameter the
/// arithmetic is AdamW::step's, operation for operation (decoupled decay,
/// bias corrections from the parameter's own step count, no AMSGrad), so
/// the parameters and the state equal AdamW's bit for bit on the CPU, and
/// save/load read and write the same archive.
class MultiTensorAdamW : public torch::optim::AdamW {
 public:
  explicit MultiTensorAdamW(std::vector<torch::optim::OptimizerParamGroup> groups,
                            torch::optim::AdamWOptions defaults = {});
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TRAIN_MULTI_TENSOR_ADAMW_H_
