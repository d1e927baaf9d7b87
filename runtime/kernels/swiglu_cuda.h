// The CUDA kernels of the SwiGLU product silu(gate) * up (docs/runtime.md
// §6), forward and backward, in one pass each over bf16 or fp32 tensors:
// torch's form takes two passes forward and four backward, and keeps
// silu(gate) for the backward. fp32 arithmetic. Plain pointers and a
// stream; swiglu.cc wraps them.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_SWIGLU_CUDA_H_
#define KIMI_PLAN_RUNTIME_KERNELS_SWIGLU_CUDA_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace kp::runtime::cuda {

/// `count` elements of gate, up and the product, contiguous, all bf16 or all fp32.
struct SwiGluShape {
  std::int64_t count = 0;
  bool bf16 = false;
};

/// h = silu(gate) * up.
cudaError_t SwiGluForward(const SwiGluShape& shape, const void* gate, const void* up, void* h, cudaStream_t stream);

/// dgate = dh * up * silu'(gate),  dup = dh * silu(gate).
cudaError_t SwiGluBackward(const SwiGluShape& shape, const void* gate, const void* up, const void* dh, void* dgate,
                           void* dup, cudaStream_t stream);

}  // namespace kp::runtime::cuda

#endif  // KIMI_PLAN_RUNTIME_KERNELS_SWIGLU_CUDA_H_
