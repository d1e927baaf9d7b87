// LibTorch face of the loss's cross entropy from logits, and the LM head with
// the loss a chunk of rows at a time (cross_entropy_cuda.cu), with autograd. In
// a build without the CUDA kernels (no CUDA Toolkit or a CPU LibTorch) the
// *Applies functions return false and callers keep the torch forms.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_CROSS_ENTROPY_H_
#define KIMI_PLAN_RUNTIME_KERNELS_CROSS_ENTROPY_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace kp::runtime {

/// True when CrossEntropyKernel takes logits [N, V]: built, fp32 or bf16 on
/// a Hopper or newer GPU.
bool CrossEntropyKernelApplies(const torch::Tensor& logits);

/// Per-row cross entropy [N] fp32 of logits [N, V] against targets [N]
/// (int64), as torch's cross_entropy of the fp32 logits without reduction:
/// 0 for targets of -100 (torch's ignore_index), NaN for other targets
/// outside [0, V). Differentiable in the logits; keeps the logits and one
/// log-sum-exp per row, and writes the gradient in the logits' dtype.
torch::Tensor CrossEntropyKernel(const torch::Tensor& logits, const torch::Tensor& targets);

/// True when LinearCrossEntropyKernel takes rows x [N, D] and the weight
/// [V, D]: built, x fp32 or bf16 on a Hopper or newer GPU, the weight fp32
/// or bf16 on the same device.
bool LinearCrossEntropyKernelApplies(const torch::Tensor& x, const torch::Tensor& weight);

/// The sum over rows of CrossEntropyKernel(torch::linear(x, weight cast to
/// x's dtype), targets), without ever holding all N x V logits: the rows go
/// in chunks of `rows_per_chunk` (0: ~64M logits a chunk), and each chunk's
/// gradients with respect to x and the weight are made in the forward, so
/// the backward only scales them by the incoming gradient. Differentiable in
/// x and the weight (an fp32 gradient); keeps dx [N, D] in x's dtype and
/// dweight [V, D] fp32 instead of the logits.
torch::Tensor LinearCrossEntropyKernel(const torch::Tensor& x, const torch::Tensor& weight,
                                       const torch::Tensor& targets, std::int64_t rows_per_chunk = 0);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_KERNELS_CROSS_ENTROPY_H_
