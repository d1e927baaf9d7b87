// The INT4 base's dequantization: the entry over the kernel of
// int4_dequant_cuda.h, or, in a build without it, entries that say no.
#include "runtime/kernels/int4_dequant.h"

#ifdef KIMI_PLAN_CUDA_KERNELS
#include "runtime/kernels/int4_dequant_cuda.h"
#include "runtime/kernels/kernel_support.h"
#else
#include "runtime/kernels/no_kernels.h"
#endif

namespace kp::runtime {

#ifdef KIMI_PLAN_CUDA_KERNELS

using namespace kernel_support;

bool Int4DequantKernelApplies(const torch::Tensor& packed, c10::ScalarType dtype) {
  return OnKernelGpu(packed) && packed.scalar_type() == torch::kInt &&
         (dtype == torch::kBFloat16 || dtype == torch::kFloat);
}

torch::Tensor Int4DequantKernel(const torch::Tensor& packed, const torch::Tensor& scales, c10::ScalarType dtype) {
  TORCH_CHECK(Int4DequantKernelApplies(packed, dtype), "Int4DequantKernel: packed: ", c10::toString(packed.scalar_type()),
              " on ", packed.device(), " to ", c10::toString(dtype),
              ", where int32 on a Hopper or newer GPU to bf16 or fp32 is read");
  std::vector<std::int64_t> scale_sizes = packed.sizes().vec();
  TORCH_CHECK(!scale_sizes.empty() && scale_sizes.back() % 4 == 0, "Int4DequantKernel: packed: ", packed.sizes(),
              ", where words in groups of 4 (32 values) are read");
  scale_sizes.back() /= 4;
  CheckKernelInputs("Int4DequantKernel", {{"packed", &packed, packed.sizes().vec(), {torch::kInt}},
                                          {"scales", &scales, scale_sizes, {torch::kBFloat16}}});
  const c10::cuda::CUDAGuard guard(packed.device());
  const torch::Tensor p = packed.contiguous(), s = scales.contiguous();
  std::vector<std::int64_t> out_sizes = packed.sizes().vec();
  out_sizes.back() *= 8;
  torch::Tensor out = torch::empty(out_sizes, p.options().dtype(dtype));
  Check(cuda::DequantizeInt4(p.numel(), p.data_ptr<std::int32_t>(), s.data_ptr(), out.data_ptr(),
                             dtype == torch::kBFloat16, c10::cuda::getCurrentCUDAStream()),
        "INT4 dequantization");
  return out;
}

#else  // no CUDA kernels in this build

bool Int4DequantKernelApplies(const torch::Tensor&, c10::ScalarType) { return false; }
torch::Tensor Int4DequantKernel(const torch::Tensor&, const torch::Tensor&, c10::ScalarType) {
  kernel_support::NoCudaKernels("Int4DequantKernel");
}

#endif

}  // namespace kp::runtime
