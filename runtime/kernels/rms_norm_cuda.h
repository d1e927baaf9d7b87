// The CUDA kernels of RMSNorm (docs/runtime.md §1) and of KDA's gated output
// norm (§5), forward and backward, one warp per row, fp32 arithmetic on fp32 or bf16 rows, deterministic.
// Plain pointers and a stream; rms_norm.cc wraps them.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_RMS_NORM_CUDA_H_
#define KIMI_PLAN_RUNTIME_KERNELS_RMS_NORM_CUDA_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace kp::runtime::cuda {

/// `rows` rows of `dim` channels, [rows, dim] contiguous, fp32 or bf16.
struct NormRows {
  std::int64_t rows = 0;
  int dim = 0;
  bool bf16 = false;
};

/// True for dim a multiple of 32.
bool RmsNormSupports(int dim);

/// y = x / sqrt(mean(x^2) + eps) * w, in x's dtype; w [dim] fp32.
cudaError_t RmsNormForward(const NormRows& shape, const void* x, const float* w, float eps, void* y,
                           cudaStream_t stream);

/// Given dy (x's dtype): dx (x's dtype) and dw_rows [rows, dim] fp32, whose
/// sum over the rows is dL/dw.
cudaError_t RmsNormBackward(const NormRows& shape, const void* x, const float* w, float eps, const void* dy, void* dx,
                            float* dw_rows, cudaStream_t stream);

/// KDA's gated output norm over rows (b, t, h) of `dim` channels: x fp32
/// [batch, tokens, heads, dim] at any strides with unit channel stride
/// (KdaChunkedCore's head-major output as it is), the gate and y
/// [batch, tokens, heads * dim] contiguous in one dtype (fp32 or bf16).
struct GatedNormRows {
  std::int64_t batch = 0, tokens = 0;
  int heads = 0, dim = 0;
  std::int64_t x_strides[3] = {0, 0, 0};   ///< of b, t, h in x, in elements
  std::int64_t dx_strides[3] = {0, 0, 0};  ///< of b, t, h in dx
  bool bf16 = false;                       ///< the gate's, y's, dy's and dgate's dtype
  std::int64_t rows() const { return batch * tokens * heads; }
};

/// y = x / sqrt(mean(x^2) + eps) * w * sigmoid(gate), fp32 inside; w [dim].
cudaError_t GatedRmsNormForward(const GatedNormRows& shape, const float* x, const void* gate, const float* w,
                                float eps, void* y, cudaStream_t stream);

/// Given dy: dx (fp32, at dx_strides), dgate, and dw_rows [rows, dim] fp32
/// in (b, t, h) row order, whose sum over the rows is dL/dw.
cudaError_t GatedRmsNormBackward(const GatedNormRows& shape, const float* x, const void* gate, const float* w,
                                 float eps, const void* dy, float* dx, void* dgate, float* dw_rows,
                                 cudaStream_t stream);

}  // namespace kp::runtime::cuda

#endif  // KIMI_PLAN_RUNTIME_KERNELS_RMS_NORM_CUDA_H_
