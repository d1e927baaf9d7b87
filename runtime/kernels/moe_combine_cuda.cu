// Kernels of moe_combine_cuda.h: one warp per token, lane l on channels l,
// l + 32, ...; the k slots in order, so every sum has a fixed order.
#include "runtime/kernels/moe_combine_cuda.h"

#include "runtime/kernels/cuda_rows.cuh"

namespace kp::runtime::cuda {
namespace {

using namespace rowwise;  // NOLINT: one warp per token row

constexpr int kMaxSlots = 16;

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    ForwardKernel(MoeCombineShape s, const T* __restrict__ rows, const std::int64_t* __restrict__ row_of,
                  const float* __restrict__ weights, T* __restrict__ y) {
  const std::int64_t token = Row();
  if (token >= s.tokens) return;
  const int lane = threadIdx.x % 32;
  for (int d = lane; d < s.dim; d += 32) {
    float acc = 0.f;
    for (int j = 0; j < s.k; ++j)
      acc += weights[token * s.k + j] * Load(rows, row_of[token * s.k + j] * s.dim + d);
    Store(y, token * s.dim + d, acc);
  }
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    BackwardKernel(MoeCombineShape s, const T* __restrict__ rows, const std::int64_t* __restrict__ row_of,
                   const float* __restrict__ weights, const T* __restrict__ dy, T* __restrict__ drows,
                   float* __restrict__ dweights) {
  const std::int64_t token = Row();
  if (token >= s.tokens) return;
  const int lane = threadIdx.x % 32;
  float dots[kMaxSlots];
#pragma unroll
  for (int j = 0; j < kMaxSlots; ++j) dots[j] = 0.f;
  for (int d = lane; d < s.dim; d += 32) {
    const float g = Load(dy, token * s.dim + d);
#pragma unroll
    for (int j = 0; j < kMaxSlots; ++j) {
      if (j >= s.k) break;
      const std::int64_t at = row_of[token * s.k + j] * s.dim + d;
      dots[j] += g * Load(rows, at);
      Store(drows, at, weights[token * s.k + j] * g);
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxSlots; ++j) {
    if (j >= s.k) break;
    const float dot = WarpSum(dots[j]);
    if (lane == 0) dweights[token * s.k + j] = dot;
  }
}

}  // namespace

bool MoeCombineSupports(int k, int dim) { return k >= 1 && k <= kMaxSlots && dim > 0 && dim % 32 == 0; }

cudaError_t MoeCombineForward(const MoeCombineShape& s, const void* rows, const std::int64_t* row_of,
                              const float* weights, void* y, cudaStream_t stream) {
  if (!MoeCombineSupports(s.k, s.dim)) return cudaErrorInvalidValue;
  if (s.tokens == 0) return cudaSuccess;
  if (s.bf16)
    ForwardKernel<<<Blocks(s.tokens), kWarps * 32, 0, stream>>>(s, static_cast<const __nv_bfloat16*>(rows), row_of,
                                                                 weights, static_cast<__nv_bfloat16*>(y));
  else
    ForwardKernel<<<Blocks(s.tokens), kWarps * 32, 0, stream>>>(s, static_cast<const float*>(rows), row_of, weights,
                                                                 static_cast<float*>(y));
  return cudaGetLastError();
}

cudaError_t MoeCombineBackward(const MoeCombineShape& s, const void* rows, const std::int64_t* row_of,
                               const float* weights, const void* dy, void* drows, float* dweights,
                               cudaStream_t stream) {
  if (!MoeCombineSupports(s.k, s.dim)) return cudaErrorInvalidValue;
  if (s.tokens == 0) return cudaSuccess;
  if (s.bf16)
    BackwardKernel<<<Blocks(s.tokens), kWarps * 32, 0, stream>>>(
        s, static_cast<const __nv_bfloat16*>(rows), row_of, weights, static_cast<const __nv_bfloat16*>(dy),
        static_cast<__nv_bfloat16*>(drows), dweights);
  else
    BackwardKernel<<<Blocks(s.tokens), kWarps * 32, 0, stream>>>(s, static_cast<const float*>(rows), row_of, weights,
                                                                  static_cast<const float*>(dy),
                                                                  static_cast<float*>(drows), dweights);
  return cudaGetLastError();
}

}  // namespace kp::runtime::cuda
