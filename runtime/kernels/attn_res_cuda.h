// The CUDA kernels of the Block Attention Residuals depth read
// (docs/runtime.md §2), forward and backward, one warp per token: no
// [tokens, N, D] fp32 copy of the stack, every sum in fp32 in a fixed order
// (deterministic). Plain pointers and a stream; attn_res.cc wraps them.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_ATTN_RES_CUDA_H_
#define KIMI_PLAN_RUNTIME_KERNELS_ATTN_RES_CUDA_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace kp::runtime::cuda {

/// `values` N depth entries of `tokens` rows of `dim` channels, each its
/// own [tokens, dim] contiguous buffer, in fp32 or bf16 (`bf16`).
struct DepthRead {
  int values = 0;
  std::int64_t tokens = 0;
  int dim = 0;
  bool bf16 = false;
};

/// The most values a read takes (the scores stay in registers).
constexpr int kMaxDepthValues = 16;

/// True for 1 <= values <= kMaxDepthValues and dim a multiple of 32.
bool DepthReadSupports(int values, int dim);

/// The N values' buffers (no stacked copy of them is made), and their
/// gradients' buffers.
struct DepthValues {
  const void* at[kMaxDepthValues] = {};
};
struct DepthGrads {
  void* at[kMaxDepthValues] = {};
};

/// read[t] = sum_i softmax_i(s)[t] v_i[t], s_i[t] = (v_i[t] . w) / rms(v_i[t])
/// with rms(x) = sqrt(mean(x^2) + eps); w [dim] fp32 (the norm weight times
/// the query); read in the values' dtype.
cudaError_t DepthReadForward(const DepthRead& shape, const DepthValues& values, const float* w, float eps,
                             void* read, cudaStream_t stream);

/// Given dread [tokens, dim] (the values' dtype): dvalues, N [tokens, dim]
/// buffers in the values' dtype, and dw_rows [tokens, dim] fp32, whose sum
/// over the tokens is dL/dw.
cudaError_t DepthReadBackward(const DepthRead& shape, const DepthValues& values, const float* w, float eps,
                              const void* dread, const DepthGrads& dvalues, float* dw_rows, cudaStream_t stream);

}  // namespace kp::runtime::cuda

#endif  // KIMI_PLAN_RUNTIME_KERNELS_ATTN_RES_CUDA_H_
