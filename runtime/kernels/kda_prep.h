// LibTorch face of KDA's inputs from its projections: the short convolution
// with its norms, and the forget gate's in-chunk cumulative log decay, chunked
// (kda_prep_cuda.cu), with autograd. In a build without the CUDA kernels (no
// CUDA Toolkit or a CPU LibTorch) the *Applies functions return false and
// callers keep the torch forms.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_KDA_PREP_H_
#define KIMI_PLAN_RUNTIME_KERNELS_KDA_PREP_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace kp::runtime {

/// True when the KDA preparation kernels take the projection rows x
/// [B, T, heads * dim]: built, fp32 or bf16 on a Hopper or newer GPU, dim a
/// multiple of 32 up to 256, a convolution of width 1 to 8.
bool KdaPrepKernelsApply(const torch::Tensor& x, std::int64_t dim, std::int64_t conv_width);

/// KdaImpl's q, k or v chunked for KdaChunkedCore (attention.h), from its
/// projection x [B, T, heads * dim] and depthwise convolution weight [heads *
/// dim, width]: scale * L2(silu(CausalDepthwiseConv(x, weight))), the L2
/// normalisation per head only when `l2`, as [B, heads, n, chunk, dim] fp32
/// zero-padded to n * chunk tokens. Differentiable in x and the weight; the
/// backward recomputes from x, so only x is kept.
torch::Tensor KdaShortConvChunked(const torch::Tensor& x, const torch::Tensor& weight, std::int64_t heads,
                                  std::int64_t chunk, bool l2, double scale, double eps);

/// KdaImpl's in-chunk cumulative log decay, chunked as KdaShortConvChunked's
/// outputs: the inclusive sum within each chunk of -exp(a_log[h]) *
/// softplus(f + dt_bias) from the gate projection f [B, T, heads * dim].
/// Differentiable in f, a_log [heads] and dt_bias [heads * dim].
torch::Tensor KdaGateCumChunked(const torch::Tensor& f, const torch::Tensor& a_log, const torch::Tensor& dt_bias,
                                std::int64_t heads, std::int64_t chunk);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_KERNELS_KDA_PREP_H_
