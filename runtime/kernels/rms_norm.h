// LibTorch face of RMSNorm and KDA's gated output norm (rms_norm_cuda.cu), with
// autograd. In a build without the CUDA kernels (no CUDA Toolkit or a CPU
// LibTorch) the *Applies functions return false and callers keep the torch
// forms.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_RMS_NORM_H_
#define KIMI_PLAN_RUNTIME_KERNELS_RMS_NORM_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace kp::runtime {

/// True when RmsNormKernel takes x [..., D]: built, fp32 or bf16 on a Hopper
/// or newer GPU, D a multiple of 32.
bool RmsNormKernelApplies(const torch::Tensor& x);

/// RMSNorm (layers.h: RmsNormalize(x) * weight) in x's dtype by the kernel,
/// fp32 inside; differentiable in x and the fp32 weight [D].
torch::Tensor RmsNormKernel(const torch::Tensor& x, const torch::Tensor& weight, double eps);

/// True when GatedRmsNormKernel takes x and gate: built, x fp32 [B, T, H, D]
/// and gate [B, T, H D] fp32 or bf16 on one Hopper or newer GPU, D a
/// multiple of 32.
bool GatedRmsNormKernelApplies(const torch::Tensor& x, const torch::Tensor& gate);

/// KDA's gated output norm (attention.h): RmsNormalize(x) * weight *
/// sigmoid(gate) per head, as [B, T, H D] in the gate's dtype, fp32 inside.
/// x is read at its strides (KdaChunkedCore's output needs no copy).
/// Differentiable in x, the gate and the fp32 weight [D]; keeps x and the
/// gate, not the fp32 norm or the sigmoid.
torch::Tensor GatedRmsNormKernel(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& weight,
                                 double eps);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_KERNELS_RMS_NORM_H_
