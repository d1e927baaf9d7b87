#ifndef KIMI_PLAN_RUNTIME_MODEL_RECOMPUTE_H_
#define KIMI_PLAN_RUNTIME_MODEL_RECOMPUTE_H_

// Autograd boundaries for activation recomputation (Megatron's selective
// --recompute-modules and full recomputation). A boundary is one node of the
// outer graph whose backward differentiates a graph of its own with
// torch::autograd::grad; the parameters are explicit inputs, so their
// gradients reach the outer graph even when no activation requires grad
// (LoRA over a frozen embedding). Not thread-safe: a boundary runs on the
// thread that calls forward or backward, as the rest of the model does.

#include <vector>

#include <torch/torch.h>

#include "runtime/model/layers.h"

namespace kp::runtime {

/// Copies of `inputs` that start a graph of their own, each requiring grad
/// as its source does.
std::vector<torch::Tensor> DetachedInputs(at::TensorList inputs);

/// The backward of a boundary node: the gradients of `outs`, weighted by
/// `grad_outs` (an undefined weight: that output got no gradient), with
/// respect to the inputs that require grad and every parameter, in one slot
/// per input, per parameter and `trailing` more (the node's non-tensor
/// arguments, which get none).
torch::autograd::variable_list BoundaryGradients(const std::vector<torch::Tensor>& outs,
                                                 const torch::autograd::variable_list& grad_outs,
                                                 const std::vector<torch::Tensor>& inputs,
                                                 const std::vector<torch::Tensor>& params, std::size_t trailing);

/// The parameters of `module` that train.
std::vector<torch::Tensor> TrainableOf(const torch::nn::Module& module);

/// module.Mix(x, record_load), recomputed in the backward when autograd
/// records: the forward keeps only x, the backward runs the module again on
/// it (recording no router load) and differentiates that graph. The
/// gradients are the plain call's bit for bit (CPU), because the outer graph
/// sums every gradient in the same order. Without grad mode: the plain call.
torch::Tensor MixRecomputed(ChannelMixer& module, const torch::Tensor& x, bool record_load);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_MODEL_RECOMPUTE_H_
