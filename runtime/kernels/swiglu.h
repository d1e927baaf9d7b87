// LibTorch face of the SwiGLU product (swiglu_cuda.cu), with autograd. In a
// build without the CUDA kernels (no CUDA Toolkit or a CPU LibTorch) the
// *Applies functions return false and callers keep the torch forms.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_SWIGLU_H_
#define KIMI_PLAN_RUNTIME_KERNELS_SWIGLU_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace kp::runtime {

/// True when SwiGluKernel takes these: built, one shape, both fp32 or both
/// bf16 on a Hopper or newer GPU.
bool SwiGluKernelApplies(const torch::Tensor& gate, const torch::Tensor& up);

/// silu(gate) * up by the kernel, in their dtype; differentiable in both,
/// keeping only gate and up for the backward.
torch::Tensor SwiGluKernel(const torch::Tensor& gate, const torch::Tensor& up);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_KERNELS_SWIGLU_H_
