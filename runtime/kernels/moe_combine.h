// LibTorch face of the MoE's weighted combination of expert rows
// (moe_combine_cuda.cu), with autograd. In a build without the CUDA kernels (no
// CUDA Toolkit or a CPU LibTorch) the *Applies functions return false and
// callers keep the torch forms.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_MOE_COMBINE_H_
#define KIMI_PLAN_RUNTIME_KERNELS_MOE_COMBINE_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace kp::runtime {

/// True when MoeCombineKernel takes expert-sorted rows [N k, D] with k
/// slots per token: built, fp32 or bf16 on a Hopper or newer GPU, 1 <= k <=
/// 16, D a multiple of 32.
bool MoeCombineKernelApplies(const torch::Tensor& rows, std::int64_t k);

/// The MoE's combination (layers.h, MoeImpl): y [N, D] in the rows' dtype,
/// y[t] = sum_j weights[t][j] rows[row_of[t k + j]] in fp32, with row_of [N k]
/// int64 a permutation and weights [N, k] fp32. Differentiable in the rows
/// and the weights.
torch::Tensor MoeCombineKernel(const torch::Tensor& rows, const torch::Tensor& row_of, const torch::Tensor& weights);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_KERNELS_MOE_COMBINE_H_
