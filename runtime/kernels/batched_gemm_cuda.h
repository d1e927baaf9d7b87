// Batched small matrix products on tensor cores in TF32 with fp32
// accumulation, for the many [C, d] x [d, d'] products of KDA's chunked
// core (kda.cc), which cuBLAS runs in fp32 on CUDA cores. Plain pointers and
// a stream, no LibTorch: batched_gemm.cc is the face.
//
// Deterministic: each output is one thread's sum in a fixed order.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_BATCHED_GEMM_CUDA_H_
#define KIMI_PLAN_RUNTIME_KERNELS_BATCHED_GEMM_CUDA_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace kp::runtime::cuda {

/// One operand of `batch` matrices: element (r, c) of matrix i at
/// data[i * batch_stride + r * row_stride + c * col_stride], where one of
/// the two strides is 1 (row-major or its transpose); fp32, or bf16 where
/// `bf16` (the right operand only).
struct MatrixBatch {
  const void* data = nullptr;
  std::int64_t batch_stride = 0;
  std::int64_t row_stride = 0;
  std::int64_t col_stride = 0;
  bool bf16 = false;
};

/// out[i] = scale a[i] b[i] (+ out[i] with `accumulate`) for i < batch, a
/// [m, k], b [k, n], out [m, n] fp32, row-major and contiguous per matrix
/// (batch stride m n). True for the shapes it takes: m a multiple of 16, n
/// and k of 8, a fp32, every stride of a and b a multiple of 4 elements
/// apart from the unit one, the data 16-byte (fp32) or 8-byte (bf16)
/// aligned, batch up to 65535 * 65535. A bf16 operand is exact in TF32.
bool BatchedGemmTf32Supports(std::int64_t batch, int m, int n, int k, const MatrixBatch& a, const MatrixBatch& b);

cudaError_t BatchedGemmTf32(std::int64_t batch, int m, int n, int k, const MatrixBatch& a, const MatrixBatch& b,
                            float scale, float* out, bool accumulate, cudaStream_t stream);

}  // namespace kp::runtime::cuda

#endif  // KIMI_PLAN_RUNTIME_KERNELS_BATCHED_GEMM_CUDA_H_
