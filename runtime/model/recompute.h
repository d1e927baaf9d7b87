#ifndef KIMI_PLAN_RUNTIME_MODEL_RECOMPUTE_H_
#define KIMI_PLAN_RUNTIME_MODEL_RECOMPUTE_H_

// Autograd boundaries for activation recomputation (Megatron's selective
// --recompute-modules and full recomputation). A boundary is one node of the
// outer graph whose backward differentiates a graph of its own with
// torch::autograd::grad; the parameters are explicit inputs, so their
// gradients reach the outer graph even when no activation requires grad
// (LoRA over a frozen embedding). Not thread-safe: a boundary runs on the
// thread that calls forward or backward, as the rest of the model does.

#include <functional>
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

/// Megatron's CheckpointWithoutOutput (--recompute-modules layernorm,
/// moe_act, mla_up_proj): for a function whose outputs the next operation
/// saves anyway, keeping the inputs alone saves nothing, so the outputs'
/// memory is freed too. Run gives fn(inputs) through a boundary that keeps
/// only the inputs; once the operation that consumes the outputs has run,
/// DiscardOutputs(consumer_output) frees the outputs' storage, and a hook on
/// consumer_output's gradient runs fn again and refills that storage before
/// the consumer's backward reads it. The boundary's backward differentiates
/// the recomputed graph, so the gradients are the plain call's bit for bit
/// (CPU). Without grad mode both calls are the plain call and a no-op.
/// One object per call site and forward; the hook and the boundary share
/// its state, so it may go out of scope after DiscardOutputs.
class OutputRecompute {
 public:
  using Fn = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;
  OutputRecompute();
  ~OutputRecompute();
  OutputRecompute(const OutputRecompute&) = delete;
  OutputRecompute& operator=(const OutputRecompute&) = delete;
  /// fn(inputs). `params`: the parameters fn uses that train.
  std::vector<torch::Tensor> Run(Fn fn, const std::vector<torch::Tensor>& inputs,
                                 const std::vector<torch::Tensor>& params);
  /// Frees the outputs' memory; `consumer_output` is the output of the
  /// operation that saved them (its gradient arrives before that operation's
  /// backward). Requires Run before; a no-op when Run recorded no graph.
  void DiscardOutputs(const torch::Tensor& consumer_output);

  /// Holds what the boundary and the hook share (recompute.cc).
  struct State;

 private:
  c10::intrusive_ptr<State> state_;
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_MODEL_RECOMPUTE_H_
