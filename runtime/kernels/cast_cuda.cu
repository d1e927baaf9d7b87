// Kernels of cast_cuda.h: 8 elements per thread of a grid-stride loop (two
// float4 and one uint4 of bf16) where both buffers are 16-byte aligned, the
// rest one element at a time.
#include "runtime/kernels/cast_cuda.h"

#include <cstdint>

#include <cuda_bf16.h>

#include "runtime/kernels/cuda_elementwise.cuh"

namespace kp::runtime::cuda {
namespace {

using namespace elementwise;  // NOLINT: grid-stride elementwise kernels

constexpr int kPack = 8;

struct alignas(16) Floats8 {
  float v[kPack];
};
struct alignas(16) Bf16s8 {
  __nv_bfloat16 v[kPack];
};

__global__ void ToBf16Kernel(std::int64_t count, bool packed, const float* __restrict__ in,
                             __nv_bfloat16* __restrict__ out) {
  const std::int64_t packs = packed ? count / kPack : 0;
  for (std::int64_t p = FirstThread(); p < packs; p += AllThreads()) {
    const Floats8 x = reinterpret_cast<const Floats8*>(in)[p];
    Bf16s8 y;
#pragma unroll
    for (int j = 0; j < kPack; ++j) y.v[j] = __float2bfloat16_rn(x.v[j]);
    reinterpret_cast<Bf16s8*>(out)[p] = y;
  }
  for (std::int64_t i = packs * kPack + FirstThread(); i < count; i += AllThreads())
    out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void ToFloatKernel(std::int64_t count, bool packed, const __nv_bfloat16* __restrict__ in,
                              float* __restrict__ out) {
  const std::int64_t packs = packed ? count / kPack : 0;
  for (std::int64_t p = FirstThread(); p < packs; p += AllThreads()) {
    const Bf16s8 x = reinterpret_cast<const Bf16s8*>(in)[p];
    Floats8 y;
#pragma unroll
    for (int j = 0; j < kPack; ++j) y.v[j] = __bfloat162float(x.v[j]);
    reinterpret_cast<Floats8*>(out)[p] = y;
  }
  for (std::int64_t i = packs * kPack + FirstThread(); i < count; i += AllThreads()) out[i] = __bfloat162float(in[i]);
}

}  // namespace

cudaError_t CastToBf16(std::int64_t count, const float* in, void* out, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  ToBf16Kernel<<<BlocksFor(count, kPack), kThreads, 0, stream>>>(count, Aligned({in, out}), in,
                                                          static_cast<__nv_bfloat16*>(out));
  return cudaGetLastError();
}

cudaError_t CastToFloat(std::int64_t count, const void* in, float* out, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  ToFloatKernel<<<BlocksFor(count, kPack), kThreads, 0, stream>>>(count, Aligned({in, out}),
                                                           static_cast<const __nv_bfloat16*>(in), out);
  return cudaGetLastError();
}

}  // namespace kp::runtime::cuda
