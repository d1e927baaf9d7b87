// AdamW as a few multi-tensor (foreach) operations per parameter group
// instead of ~8 kernels per parameter: the same update, state and
// checkpoint format as torch::optim::AdamW, whose step it replaces.
//
// Not thread-safe (as any optimizer).
#ifndef KIMI_PLAN_RUNTIME_TRAIN_MULTI_TENSOR_ADAMW_H_
#define KIMI_PLAN_RUNTIME_TRAIN_MULTI_TENSOR_ADAMW_H_

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace kp::runtime {

/// torch::optim::AdamW with step() over lists of tensors. Per parameter the
/// arithmetic is AdamW::step's, operation for operation (decoupled decay,
/// bias corrections from the parameter's own step count, no AMSGrad), so
/// the parameters and the state equal AdamW's bit for bit on the CPU (on a
/// GPU the multi-tensor kernels may round the denominator's division by the
/// bias correction differently, by an ulp), and save/load read and write the
/// same archive. Each update takes at most `bucket_elements` elements, or
/// one larger parameter alone, which bounds the denominators' temporaries.
/// Where every tensor of an update is fp32 on one GPU and LibTorch has it
/// (2.1 or newer), the update is PyTorch's fused AdamW kernel instead: the
/// same formulas in fp32 registers in one pass over memory, equal to AdamW
/// within rounding (not bit for bit). ScaleGradientsInNextStep folds a
/// gradient scale (clipping's) into the next update: on the unfused path a
/// multiply of the gradients first, as clipping would; in the fused kernel
/// a division by its inverse, without the extra pass over the gradients.
class MultiTensorAdamW : public torch::optim::AdamW {
 public:
  explicit MultiTensorAdamW(std::vector<torch::optim::OptimizerParamGroup> groups,
                            torch::optim::AdamWOptions defaults = {},
                            std::int64_t bucket_elements = std::int64_t{1} << 26);
  torch::Tensor step(LossClosure closure = nullptr) override;
  /// The next step uses `scale` times every gradient (0 < scale; 1: as is).
  void ScaleGradientsInNextStep(double scale) { grad_scale_ = scale; }
  /// The state of `p` (one of the optimizer's tensors), or null before its
  /// first update.
  const torch::optim::AdamWParamState* StateOf(const torch::Tensor& p) const;
  /// Replaces `p`'s state: the moments (copied, in p's dtype, shape and
  /// device) and the count of updates so far (0: as before the first).
  void SetState(const torch::Tensor& p, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq,
                std::int64_t step);

 private:
  std::int64_t bucket_elements_;
  double grad_scale_ = 1;
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TRAIN_MULTI_TENSOR_ADAMW_H_
