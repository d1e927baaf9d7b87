// The CUDA kernel of the INT4 base's dequantization (runtime/model/
// int4_linear.h): one packed word per thread, its eight nibbles times the
// group's bf16 scale, stored as one 16-byte (bf16) or two (fp32) vectors,
// where the LibTorch form runs a pass per shift, mask, conversion, repeat
// and product over the whole matrix. Plain pointers and a stream;
// int4_dequant.cc wraps them.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_INT4_DEQUANT_CUDA_H_
#define KIMI_PLAN_RUNTIME_KERNELS_INT4_DEQUANT_CUDA_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace kp::runtime::cuda {

/// out[8w + j] = (((packed[w] >> 4j) & 0xf) - 8) x scales[w / 4] for
/// `words` contiguous words (a group of 32 values is 4 words and one bf16
/// scale), in bf16 (round to nearest even) when `out_bf16`, else fp32.
/// `out` 16-byte aligned.
cudaError_t DequantizeInt4(std::int64_t words, const std::int32_t* packed, const void* scales, void* out,
                           bool out_bf16, cudaStream_t stream);

}  // namespace kp::runtime::cuda

#endif  // KIMI_PLAN_RUNTIME_KERNELS_INT4_DEQUANT_CUDA_H_
