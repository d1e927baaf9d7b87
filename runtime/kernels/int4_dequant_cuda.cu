// Kernel of int4_dequant_cuda.h. The product of a nibble (4 bits) and a
// bf16 scale (8 significant bits) is exact in fp32, so the fp32 result is
// the LibTorch form's, and its bf16 rounding too.
#include "runtime/kernels/int4_dequant_cuda.h"

#include <cuda_bf16.h>

#include "runtime/kernels/cuda_elementwise.cuh"

namespace kp::runtime::cuda {
namespace {

using namespace elementwise;  // NOLINT: grid-stride elementwise kernels

constexpr int kPerWord = 8;
constexpr int kWordsPerGroup = 4;

struct alignas(16) Bf16s8 {
  __nv_bfloat16 v[kPerWord];
};
struct alignas(16) Floats4 {
  float v[4];
};

template <bool kBf16>
__global__ void DequantizeInt4Kernel(std::int64_t words, const std::int32_t* __restrict__ packed,
                                     const __nv_bfloat16* __restrict__ scales, void* __restrict__ out) {
  for (std::int64_t w = FirstThread(); w < words; w += AllThreads()) {
    const std::uint32_t word = static_cast<std::uint32_t>(packed[w]);
    const float scale = __bfloat162float(scales[w / kWordsPerGroup]);
    float v[kPerWord];
#pragma unroll
    for (int j = 0; j < kPerWord; ++j) v[j] = static_cast<float>(static_cast<int>((word >> (4 * j)) & 0xfu) - 8) * scale;
    if constexpr (kBf16) {
      Bf16s8 y;
#pragma unroll
      for (int j = 0; j < kPerWord; ++j) y.v[j] = __float2bfloat16_rn(v[j]);
      reinterpret_cast<Bf16s8*>(out)[w] = y;
    } else {
      Floats4* y = reinterpret_cast<Floats4*>(out) + 2 * w;
      y[0] = Floats4{{v[0], v[1], v[2], v[3]}};
      y[1] = Floats4{{v[4], v[5], v[6], v[7]}};
    }
  }
}

}  // namespace

cudaError_t DequantizeInt4(std::int64_t words, const std::int32_t* packed, const void* scales, void* out,
                           bool out_bf16, cudaStream_t stream) {
  if (words == 0) return cudaSuccess;
  const unsigned blocks = BlocksFor(words, 1);
  const auto* s = static_cast<const __nv_bfloat16*>(scales);
  if (out_bf16) {
    DequantizeInt4Kernel<true><<<blocks, kThreads, 0, stream>>>(words, packed, s, out);
  } else {
    DequantizeInt4Kernel<false><<<blocks, kThreads, 0, stream>>>(words, packed, s, out);
  }
  return cudaGetLastError();
}

}  // namespace kp::runtime::cuda
