// The batched TF32 products: tensors to the kernel's matrix batches
// (batched_gemm_cuda.h), or, in a build without the kernels, entries that
// say no.
#include "runtime/kernels/batched_gemm.h"

#ifdef KIMI_PLAN_CUDA_KERNELS
#include <cstdint>
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
// dimensions are not one uniform stride. Dimensions of size 1 take no part:
// their strides are arbitrary.
std::optional<cuda::MatrixBatch> BatchOf(const torch::Tensor& x) {
  const std::int64_t d = x.dim();
  if (d < 2) return std::nullopt;
  cuda::MatrixBatch m{x.data_ptr(), 0, x.stride(d - 2), x.stride(d - 1), x.scalar_type() == torch::kBFloat16};
  std::int64_t inner = -1;  // the innermost leading dimension of size > 1 seen so far
  for (std::int64_t i = d - 3; i >= 0; --i) {
    if (x.size(i) <= 1) continue;
    if (inner >= 0 && x.stride(i) != x.stride(inner) * x.size(inner)) return std::nullopt;
    if (inner < 0) m.batch_stride = x.stride(i);
    inner = i;
  }
  return m;
}

std::int64_t BatchCount(const torch::Tensor& x) { return x.numel() / (x.size(-1) * x.size(-2)); }

bool Takes(const torch::Tensor& a, const torch::Tensor& b, std::optional<cuda::MatrixBatch>* ma,
           std::optional<cuda::MatrixBatch>* mb) {
  if (!OnCudaInFp32(a) || !FloatOrBf16OnCuda(b) || a.device() != b.device() || a.dim() != b.dim() || a.dim() < 2)
    return false;
  if (a.sizes().slice(0, a.dim() - 2) != b.sizes().slice(0, b.dim() - 2) || a.size(-1) != b.size(-2)) return false;
  if (a.size(-2) == 0 || a.size(-1) == 0 || b.size(-1) == 0) return false;
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
    // The kernel reads and writes it two floats at a time, while it reads a and b.
    TORCH_CHECK(out.is_contiguous() && reinterpret_cast<std::uintptr_t>(out.data_ptr()) % 8 == 0,
                "BatchedMatmulTf32: accumulate_into must be contiguous and 8-byte aligned");
    TORCH_CHECK(!out.storage().is_alias_of(a.storage()) && !out.storage().is_alias_of(b.storage()),
                "BatchedMatmulTf32: accumulate_into must not share storage with a or b");
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
