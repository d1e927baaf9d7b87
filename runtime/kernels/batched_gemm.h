// LibTorch face of the batched TF32 products (batched_gemm_cuda.cu): many
// small matrix products on tensor cores, for use inside other kernels'
// autograd nodes (KDA's chunked core, kda.cc); no autograd of their own. In
// a build without the CUDA kernels the *Applies function returns false.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_BATCHED_GEMM_H_
#define KIMI_PLAN_RUNTIME_KERNELS_BATCHED_GEMM_H_

#include <torch/torch.h>

namespace kp::runtime {

/// True when BatchedMatmulTf32 takes a [..., M, K] and b [..., K, N]: built,
/// on one Hopper or newer GPU, a fp32 and b fp32 or bf16, the same leading
/// sizes (no broadcasting), each a row-major matrix or a transposed one (any
/// of `x.transpose(-1, -2)`), the leading dimensions one uniform batch
/// stride, M a multiple of 16, N and K of 8, the strides multiples of 4
/// elements and the data 16-byte (fp32) or 8-byte (bf16) aligned.
bool BatchedMatmulTf32Applies(const torch::Tensor& a, const torch::Tensor& b);

/// scale * torch::matmul(a, b) with TF32 operands (10 mantissa bits; a bf16
/// b is exact in them) and fp32 accumulation and result, [..., M, N]
/// contiguous; with `accumulate_into` defined (contiguous, [..., M, N]
/// fp32), the product is added to it in place and it is returned.
/// Deterministic.
torch::Tensor BatchedMatmulTf32(const torch::Tensor& a, const torch::Tensor& b,
                                const torch::Tensor& accumulate_into = {}, float scale = 1.f);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_KERNELS_BATCHED_GEMM_H_
