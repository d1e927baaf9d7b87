// Device and launch helpers of the elementwise kernels (cast_cuda.cu,
// swiglu_cuda.cu): grid-stride loops over 16-byte packs where every buffer
// is 16-byte aligned, single elements otherwise.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_CUDA_ELEMENTWISE_CUH_
#define KIMI_PLAN_RUNTIME_KERNELS_CUDA_ELEMENTWISE_CUH_

#include <algorithm>
#include <cstdint>
#include <initializer_list>

namespace kp::runtime::cuda::elementwise {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 65536;

/// This thread's first index of a grid-stride loop, and the loop's stride.
__device__ __forceinline__ std::int64_t FirstThread() { return blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; }
__device__ __forceinline__ std::int64_t AllThreads() { return std::int64_t{gridDim.x} * blockDim.x; }

/// True when every pointer is 16-byte aligned (the packs may be used).
inline bool Aligned(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  return true;
}

/// Blocks of kThreads for one pack of `per_pack` elements per thread.
inline unsigned BlocksFor(std::int64_t count, int per_pack) {
  return static_cast<unsigned>(std::min<std::int64_t>((count / per_pack + kThreads) / kThreads, kMaxBlocks));
}

}  // namespace kp::runtime::cuda::elementwise

#endif  // KIMI_PLAN_RUNTIME_KERNELS_CUDA_ELEMENTWISE_CUH_
