// LibTorch face of the weights' bf16 cast (cast_cuda.cu), with autograd. In a
// build without the CUDA kernels (no CUDA Toolkit or a CPU LibTorch) the
// *Applies functions return false and callers keep the torch forms.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_CAST_H_
#define KIMI_PLAN_RUNTIME_KERNELS_CAST_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace kp::runtime {

/// True when CastKernel takes x to `dtype`: built, x fp32 on a Hopper or
/// newer GPU, dtype bf16.
bool CastKernelApplies(const torch::Tensor& x, c10::ScalarType dtype);

/// x.to(dtype), bit for bit, by the kernel; differentiable, the gradient
/// cast back to fp32 by the kernel too.
torch::Tensor CastKernel(const torch::Tensor& x, c10::ScalarType dtype);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_KERNELS_CAST_H_
