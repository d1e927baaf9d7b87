// The CUDA kernels of the fp32 <-> bf16 casts of the weights (each layer
// runs in bf16 from fp32 master weights, docs/runtime.md §10): 16-byte
// loads and stores where torch's conversion copy moves one element per
// thread, for the ~1.1 B parameters cast every forward and whose gradients
// come back every backward. Round to nearest even, as torch's. Plain
// pointers and a stream; cast.cc wraps them.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_CAST_CUDA_H_
#define KIMI_PLAN_RUNTIME_KERNELS_CAST_CUDA_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace kp::runtime::cuda {

/// out[i] = bf16(in[i]) for `count` contiguous elements.
cudaError_t CastToBf16(std::int64_t count, const float* in, void* out, cudaStream_t stream);

/// out[i] = float(in[i]) for `count` contiguous elements.
cudaError_t CastToFloat(std::int64_t count, const void* in, float* out, cudaStream_t stream);

}  // namespace kp::runtime::cuda

#endif  // KIMI_PLAN_RUNTIME_KERNELS_CAST_CUDA_H_
