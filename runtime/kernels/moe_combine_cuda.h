// The CUDA kernels of the MoE's weighted combination (docs/runtime.md §7),
// forward and backward: each token's k expert outputs gathered from the
// expert-sorted rows and summed with the routing weights in fp32, one warp
// per token. torch's form scatters the rows back to slot order, upcasts
// them to fp32 and keeps that copy for the backward. Deterministic. Plain
// pointers and a stream; moe_combine.cc wraps them.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_MOE_COMBINE_CUDA_H_
#define KIMI_PLAN_RUNTIME_KERNELS_MOE_COMBINE_CUDA_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace kp::runtime::cuda {

/// `tokens` tokens with `k` routing slots each; rows of `dim` channels,
/// bf16 or fp32; slot s = token * k + j.
struct MoeCombineShape {
  std::int64_t tokens = 0;
  int k = 0;
  int dim = 0;
  bool bf16 = false;
};

/// True for 1 <= k <= 16 and dim a multiple of 32.
bool MoeCombineSupports(int k, int dim);

/// y[t] = sum_j weights[t][j] rows[row_of[t k + j]], with rows [tokens k,
/// dim] in expert order, row_of [tokens k] int64 (a permutation), weights
/// [tokens, k] fp32; y [tokens, dim] in the rows' dtype.
cudaError_t MoeCombineForward(const MoeCombineShape& shape, const void* rows, const std::int64_t* row_of,
                              const float* weights, void* y, cudaStream_t stream);

/// Given dy: drows[row_of[t k + j]] = weights[t][j] dy[t] (the rows' dtype)
/// and dweights[t][j] = dy[t] . rows[row_of[t k + j]] (fp32).
cudaError_t MoeCombineBackward(const MoeCombineShape& shape, const void* rows, const std::int64_t* row_of,
                               const float* weights, const void* dy, void* drows, float* dweights,
                               cudaStream_t stream);

}  // namespace kp::runtime::cuda

#endif  // KIMI_PLAN_RUNTIME_KERNELS_MOE_COMBINE_CUDA_H_
