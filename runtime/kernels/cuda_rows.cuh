// Device helpers of the row kernels (attn_res_cuda.cu, rms_norm_cuda.cu):
// one warp per row of fp32 or bf16 channels, fp32 arithmetic.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_CUDA_ROWS_CUH_
#define KIMI_PLAN_RUNTIME_KERNELS_CUDA_ROWS_CUH_

#include <cstdint>

#include <cuda_bf16.h>

namespace kp::runtime::cuda::rowwise {

constexpr int kWarps = 8;  // rows per block of kWarps * 32 threads

__device__ __forceinline__ float Load(const float* p, std::int64_t i) { return p[i]; }
__device__ __forceinline__ float Load(const __nv_bfloat16* p, std::int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void Store(float* p, std::int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, std::int64_t i, float v) { p[i] = __float2bfloat16(v); }

/// The sum over the warp's 32 lanes, in a fixed butterfly order.
__device__ __forceinline__ float WarpSum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

/// This thread's row: blockIdx.x * kWarps + its warp.
__device__ __forceinline__ std::int64_t Row() {
  return static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
}

inline unsigned Blocks(std::int64_t rows) { return static_cast<unsigned>((rows + kWarps - 1) / kWarps); }

}  // namespace kp::runtime::cuda::rowwise

#endif  // KIMI_PLAN_RUNTIME_KERNELS_CUDA_ROWS_CUH_
