// The batched TF32 products: tensors to the kernel's matrix batches
// (batched_gemm_cuda.h), or, in a build without the kernels, entries that
// say no.
#include "runtime/kernels/batched_gemm.h"

#ifdef KIMI_PLAN_CUDA_KERNELS
#include <optional>

#include "runtime/kernels/batched_gemm_cuda.h"
#include "runtime/kernels/kernel_support.h"
#else
#include "runtime/kernels/no_kernels.h"
#endif

namespace kp::runtime {

#ifdef KIMI_PLAN_CUDA_KERNELS
namespace {

using namespace kernel_support;

// x [..., R, C] as one batch of matrices, or none where its leading
// dimensions are not one uniform stride.
std::optional<cuda::MatrixBatch> BatchOf(const torch::Tensor& x) {
  const std::int64_t d = x.dim();
  if (d < 2) return std::nullopt;
  cuda::MatrixBatch m{x.data_ptr(), 0, x.stride(d - 2), x.stride(d - 1), x.scalar_type() == torch::kBFloat16};
  if (d > 2) m.batch_stride = x.stride(d - 3);
  for (std::int64_t i = 0; i + 3 < d; ++i)
    if (x.size(i) > 1 && x.stride(i) != x.stride(i + 1) * x.size(i + 1)) return std::nullopt;
  return m;
}

std::int64_t BatchCount(const torch::Tensor& x) { return x.numel() / (x.size(-1) * x.size(-2)); }

bool Takes(const torch::Tensor& a, const torch::Tensor& b, std::optional<cuda::MatrixBatch>* ma,
           std::optional<cuda::MatrixBatch>* mb) {
  if (!OnCudaInFp32(a) || !FloatOrBf16OnCuda(b) || a.device() != b.device() || a.dim() != b.dim() || a.dim() < 2)
    return false;
  if (a.sizes().slice(0, a.dim() - 2) != b.sizes().slice(0, b.dim() - 2) || a.size(-1) != b.size(-2)) return false;
  *ma = BatchOf(a);
  *mb = BatchOf(b);
  return ma->has_value() && mb->has_value() &&
         cuda::BatchedGemmTf32Supports(BatchCount(a), static_cast<int>(a.size(-2)), static_cast<int>(b.size(-1)),
                                       static_cast<int>(a.size(-1)), **ma, **mb);
}

}  // namespace

bool BatchedMatmulTf32Applies(const torch::Tensor& a, const torch::Tensor& b) {
  std::optional<cuda::MatrixBatch> ma, mb;
  return Takes(a, b, &ma, &mb);
}

torch::Tensor BatchedMatmulTf32(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& accumulate_into,
                                float scale) {
  std::optional<cuda::MatrixBatch> ma, mb;
  TORCH_CHECK(Takes(a, b, &ma, &mb), "BatchedMatmulTf32: a ", a.sizes(), " (strides ", a.strides(), ") and b ",
              b.sizes(), " (strides ", b.strides(),
              "): not a fp32 and b fp32 or bf16 on one Hopper or newer GPU, equal leading sizes, M a multiple of 16, "
              "N and K of 8, row-major or transposed matrices with strides of 4 elements, aligned");
  std::vector<std::int64_t> shape = a.sizes().vec();
  shape.back() = b.size(-1);
  torch::Tensor out = accumulate_into;
  if (out.defined()) {
    CheckKernelInputs("BatchedMatmulTf32", {{"a", &a, {}, kFp32}, {"accumulate_into", &out, shape, kFp32}});
    TORCH_CHECK(out.is_contiguous(), "BatchedMatmulTf32: accumulate_into must be contiguous");
  } else {
    out = torch::empty(shape, a.options());
  }
  const c10::cuda::CUDAGuard guard(a.device());
  Check(cuda::BatchedGemmTf32(BatchCount(a), static_cast<int>(a.size(-2)), static_cast<int>(b.size(-1)),
                              static_cast<int>(a.size(-1)), *ma, *mb, scale, Out(out), accumulate_into.defined(),
                              c10::cuda::getCurrentCUDAStream()),
        "batched TF32 product");
  return out;
}

#else  // no CUDA kernels in this build

bool BatchedMatmulTf32Applies(const torch::Tensor&, const torch::Tensor&) { return false; }
torch::Tensor BatchedMatmulTf32(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, float) {
  kernel_support::NoCudaKernels("BatchedMatmulTf32");
}

#endif

}  // namespace kp::runtime
