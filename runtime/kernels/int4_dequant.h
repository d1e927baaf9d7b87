// LibTorch face of the INT4 base's dequantization kernel (int4_dequant_cuda.cu).
// In a build without the CUDA kernels (no CUDA Toolkit or a CPU LibTorch)
// Int4DequantKernelApplies returns false and DequantizeInt4Weight keeps its
// LibTorch form.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_INT4_DEQUANT_H_
#define KIMI_PLAN_RUNTIME_KERNELS_INT4_DEQUANT_H_

#include <torch/torch.h>

namespace kp::runtime {

/// True when Int4DequantKernel takes the weight: built, `packed` int32 on a
/// Hopper or newer GPU, `dtype` bf16 or fp32.
bool Int4DequantKernelApplies(const torch::Tensor& packed, c10::ScalarType dtype);

/// DequantizeInt4Weight's values bit for bit (int4_linear.h): packed [...,
/// words] int32 (8 nibbles a word, element j in bits 4j..4j+3), scales [...,
/// words / 4] bf16, to [..., words x 8] in `dtype`. No autograd: the base is
/// frozen. An input of another shape, dtype or device is an error naming it.
torch::Tensor Int4DequantKernel(const torch::Tensor& packed, const torch::Tensor& scales, c10::ScalarType dtype);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_KERNELS_INT4_DEQUANT_H_
