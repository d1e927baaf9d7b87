// LibTorch face of the attention-residual depth read (attn_res_cuda.cu), with
// autograd. In a build without the CUDA kernels (no CUDA Toolkit or a CPU
// LibTorch) the *Applies functions return false and callers keep the torch
// forms.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_ATTN_RES_H_
#define KIMI_PLAN_RUNTIME_KERNELS_ATTN_RES_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace kp::runtime {

/// True when AttnResReadKernel takes these depth values (the stack entries
/// then the partial sum): built, on one Hopper or newer GPU, all fp32 or all bf16 of
/// one shape [..., D], at most 16 of them, D a multiple of 32.
bool AttnResKernelApplies(const std::vector<torch::Tensor>& values);

/// AttnResRead's result (layers.h) by the kernel, in the values' dtype;
/// differentiable in the values, the norm weight and the query.
torch::Tensor AttnResReadKernel(const std::vector<torch::Tensor>& values, const torch::Tensor& norm_weight,
                                const torch::Tensor& query, double eps);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_KERNELS_ATTN_RES_H_
