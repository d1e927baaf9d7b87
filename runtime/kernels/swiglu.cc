// The SwiGLU product: autograd nodes over the kernels of swiglu_cuda.h, or, in
// a build without them, entries that say no.
#include "runtime/kernels/swiglu.h"

#ifdef KIMI_PLAN_CUDA_KERNELS
#include <algorithm>
#include <limits>

#include "runtime/kernels/kernel_support.h"
#include "runtime/kernels/swiglu_cuda.h"
#else
#include "runtime/kernels/no_kernels.h"
#endif

namespace kp::runtime {

#ifdef KIMI_PLAN_CUDA_KERNELS
namespace {

using namespace kernel_support;

class SwiGluFunction : public torch::autograd::Function<SwiGluFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& gate, const torch::Tensor& up) {
    const c10::cuda::CUDAGuard guard(gate.device());
    const torch::Tensor g = gate.contiguous(), u = up.contiguous();
    torch::Tensor h = torch::empty_like(g);
    Check(cuda::SwiGluForward(ShapeOf(g), g.data_ptr(), u.data_ptr(), h.data_ptr(), c10::cuda::getCurrentCUDAStream()),
          "SwiGLU");
    ctx->save_for_backward({g, u});
    return {h};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &g = saved[0], &u = saved[1];
    const c10::cuda::CUDAGuard guard(g.device());
    const torch::Tensor dh = grads[0].to(g.scalar_type()).contiguous();
    torch::Tensor dg = torch::empty_like(g), du = torch::empty_like(u);
    Check(cuda::SwiGluBackward(ShapeOf(g), g.data_ptr(), u.data_ptr(), dh.data_ptr(), dg.data_ptr(), du.data_ptr(),
                               c10::cuda::getCurrentCUDAStream()),
          "SwiGLU backward");
    return {dg, du};
  }

 private:
  static cuda::SwiGluShape ShapeOf(const torch::Tensor& g) { return {g.numel(), g.scalar_type() == torch::kBFloat16}; }
};

}  // namespace

bool SwiGluKernelApplies(const torch::Tensor& gate, const torch::Tensor& up) {
  return FloatOrBf16OnCuda(gate) && up.scalar_type() == gate.scalar_type() && up.sizes() == gate.sizes() &&
         up.device() == gate.device();
}

torch::Tensor SwiGluKernel(const torch::Tensor& gate, const torch::Tensor& up) {
  TORCH_CHECK(FloatOrBf16OnCuda(gate), "SwiGluKernel: gate: not fp32 or bf16 on a Hopper or newer GPU");
  CheckKernelInputs("SwiGluKernel", {{"gate", &gate, gate.sizes().vec(), kFloats},
                                     {"up", &up, gate.sizes().vec(), {gate.scalar_type()}}});
  return SwiGluFunction::apply(gate, up)[0];
}

#else  // no CUDA kernels in this build

bool SwiGluKernelApplies(const torch::Tensor&, const torch::Tensor&) { return false; }
torch::Tensor SwiGluKernel(const torch::Tensor&, const torch::Tensor&) {
  kernel_support::NoCudaKernels("SwiGluKernel");
}

#endif

}  // namespace kp::runtime
