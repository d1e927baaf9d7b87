// The weights' bf16 cast: autograd nodes over the kernels of cast_cuda.h, or,
// in a build without them, entries that say no.
#include "runtime/kernels/cast.h"

#ifdef KIMI_PLAN_CUDA_KERNELS
#include <algorithm>
#include <limits>

#include "runtime/kernels/kernel_support.h"
#include "runtime/kernels/cast_cuda.h"
#else
#include "runtime/kernels/no_kernels.h"
#endif

namespace kp::runtime {

#ifdef KIMI_PLAN_CUDA_KERNELS
namespace {

using namespace kernel_support;

class CastFunction : public torch::autograd::Function<CastFunction> {
 public:
  static variable_list forward(AutogradContext*, const torch::Tensor& x) {
    const c10::cuda::CUDAGuard guard(x.device());
    const torch::Tensor xc = x.contiguous();
    torch::Tensor y = torch::empty(xc.sizes(), xc.options().dtype(torch::kBFloat16));
    Check(cuda::CastToBf16(xc.numel(), In(xc), y.data_ptr(), c10::cuda::getCurrentCUDAStream()), "cast to bf16");
    return {y};
  }

  static variable_list backward(AutogradContext*, variable_list grads) {
    const torch::Tensor dy = grads[0].to(torch::kBFloat16).contiguous();
    const c10::cuda::CUDAGuard guard(dy.device());
    torch::Tensor dx = torch::empty(dy.sizes(), dy.options().dtype(torch::kFloat));
    Check(cuda::CastToFloat(dy.numel(), dy.data_ptr(), Out(dx), c10::cuda::getCurrentCUDAStream()), "cast to fp32");
    return {dx};
  }
};

}  // namespace

bool CastKernelApplies(const torch::Tensor& x, c10::ScalarType dtype) {
  return dtype == torch::kBFloat16 && OnCudaInFp32(x);
}

torch::Tensor CastKernel(const torch::Tensor& x, c10::ScalarType dtype) {
  TORCH_CHECK(CastKernelApplies(x, dtype), "CastKernel: x: ", c10::toString(x.scalar_type()), " on ", x.device(), " to ",
              c10::toString(dtype), ", where fp32 on a Hopper or newer GPU to bf16 is cast");
  return CastFunction::apply(x)[0];
}

#else  // no CUDA kernels in this build

bool CastKernelApplies(const torch::Tensor&, c10::ScalarType) { return false; }
torch::Tensor CastKernel(const torch::Tensor&, c10::ScalarType) {
  kernel_support::NoCudaKernels("CastKernel");
}

#endif

}  // namespace kp::runtime
