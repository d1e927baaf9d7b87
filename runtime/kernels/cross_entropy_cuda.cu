// Kernels of cross_entropy_cuda.h: one block per row. Forward: each thread
// keeps a running (max, sum of exp) over its strided share of the row (the
// online softmax), the block combines the pairs in a fixed tree. Backward:
// each element's gradient from the saved log-sum-exp, in one pass.
#include "runtime/kernels/cross_entropy_cuda.h"

#include <cmath>

#include "runtime/kernels/cuda_rows.cuh"

namespace kp::runtime::cuda {
namespace {

using rowwise::Load;
using rowwise::Store;

constexpr int kThreads = 512;

struct MaxSum {
  float max, sum;  // sum of exp(x - max)
};

__device__ __forceinline__ MaxSum Combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

__device__ MaxSum BlockCombine(MaxSum v) {
  __shared__ MaxSum warp_results[kThreads / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const MaxSum other{__shfl_xor_sync(0xffffffffu, v.max, offset), __shfl_xor_sync(0xffffffffu, v.sum, offset)};
    v = Combine(v, other);
  }
  if (threadIdx.x % 32 == 0) warp_results[threadIdx.x / 32] = v;
  __syncthreads();
  MaxSum total = warp_results[0];
  for (int w = 1; w < kThreads / 32; ++w) total = Combine(total, warp_results[w]);
  return total;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    ForwardKernel(LogitRows s, const T* __restrict__ logits, const std::int64_t* __restrict__ targets,
                  float* __restrict__ loss, float* __restrict__ lse) {
  const std::int64_t row = blockIdx.x, at = row * s.vocab;
  MaxSum v{-INFINITY, 0.f};
  for (std::int64_t i = threadIdx.x; i < s.vocab; i += kThreads) v = Combine(v, {Load(logits, at + i), 1.f});
  const MaxSum total = BlockCombine(v);
  if (threadIdx.x != 0) return;
  const float log_sum = total.max + logf(total.sum);
  const std::int64_t target = targets[row];
  lse[row] = log_sum;
  if (target == kIgnoredTarget)
    loss[row] = 0.f;
  else if (target < 0 || target >= s.vocab)
    loss[row] = NAN;
  else
    loss[row] = log_sum - Load(logits, at + target);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    BackwardKernel(LogitRows s, const T* __restrict__ logits, const std::int64_t* __restrict__ targets,
                   const float* __restrict__ lse, const float* __restrict__ dloss, T* __restrict__ dlogits) {
  const std::int64_t row = blockIdx.x, at = row * s.vocab, target = targets[row];
  const float g = target == kIgnoredTarget ? 0.f : dloss[row], log_sum = lse[row];
  for (std::int64_t i = threadIdx.x; i < s.vocab; i += kThreads) {
    const float p = expf(Load(logits, at + i) - log_sum);
    Store(dlogits, at + i, g * (p - (i == target ? 1.f : 0.f)));
  }
}

}  // namespace

cudaError_t CrossEntropyForward(const LogitRows& s, const void* logits, const std::int64_t* targets, float* loss,
                                float* lse, cudaStream_t stream) {
  if (s.rows == 0) return cudaSuccess;
  if (s.rows > 0x7fffffff || s.vocab <= 0) return cudaErrorInvalidValue;
  const auto blocks = static_cast<unsigned>(s.rows);
  if (s.bf16)
    ForwardKernel<<<blocks, kThreads, 0, stream>>>(s, static_cast<const __nv_bfloat16*>(logits), targets, loss, lse);
  else
    ForwardKernel<<<blocks, kThreads, 0, stream>>>(s, static_cast<const float*>(logits), targets, loss, lse);
  return cudaGetLastError();
}

cudaError_t CrossEntropyBackward(const LogitRows& s, const void* logits, const std::int64_t* targets,
                                 const float* lse, const float* dloss, void* dlogits, cudaStream_t stream) {
  if (s.rows == 0) return cudaSuccess;
  if (s.rows > 0x7fffffff || s.vocab <= 0) return cudaErrorInvalidValue;
  const auto blocks = static_cast<unsigned>(s.rows);
  if (s.bf16)
    BackwardKernel<<<blocks, kThreads, 0, stream>>>(s, static_cast<const __nv_bfloat16*>(logits), targets, lse, dloss,
                                                    static_cast<__nv_bfloat16*>(dlogits));
  else
    BackwardKernel<<<blocks, kThreads, 0, stream>>>(s, static_cast<const float*>(logits), targets, lse, dloss,
                                                    static_cast<float*>(dlogits));
  return cudaGetLastError();
}

}  // namespace kp::runtime::cuda
