// RMSNorm and KDA's gated output norm: autograd nodes over the kernels of
// rms_norm_cuda.h, or, in a build without them, entries that say no.
#include "runtime/kernels/rms_norm.h"

#ifdef KIMI_PLAN_CUDA_KERNELS
#include <algorithm>
#include <limits>

#include "runtime/kernels/kernel_support.h"
#include "runtime/kernels/rms_norm_cuda.h"
#else
#include "runtime/kernels/no_kernels.h"
#endif

namespace kp::runtime {

#ifdef KIMI_PLAN_CUDA_KERNELS
namespace {

using namespace kernel_support;

// RMSNorm over rows [rows, D].
class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& rows, const torch::Tensor& w, double eps) {
    const c10::cuda::CUDAGuard guard(rows.device());
    const torch::Tensor x = rows.contiguous(), wc = w.contiguous();
    torch::Tensor y = torch::empty_like(x);
    Check(cuda::RmsNormForward(ShapeOf(x), x.data_ptr(), In(wc), static_cast<float>(eps), y.data_ptr(),
                               c10::cuda::getCurrentCUDAStream()),
          "RMSNorm");
    ctx->save_for_backward({x, wc});
    ctx->saved_data["eps"] = eps;
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1];
    const c10::cuda::CUDAGuard guard(x.device());
    const torch::Tensor dy = grads[0].to(x.scalar_type()).contiguous();
    torch::Tensor dx = torch::empty_like(x), dw_rows = torch::empty(x.sizes(), w.options());
    Check(cuda::RmsNormBackward(ShapeOf(x), x.data_ptr(), In(w), static_cast<float>(ctx->saved_data["eps"].toDouble()),
                                dy.data_ptr(), dx.data_ptr(), Out(dw_rows), c10::cuda::getCurrentCUDAStream()),
          "RMSNorm backward");
    return {dx, dw_rows.sum(0), torch::Tensor()};
  }

 private:
  static cuda::NormRows ShapeOf(const torch::Tensor& x) {
    return {x.size(0), static_cast<int>(x.size(1)), x.scalar_type() == torch::kBFloat16};
  }
};

// x [B, T, H, D] fp32 at its strides (unit channel stride), gate [B, T, H D].
// dx is made head-major, [B, H, T, D] in memory, as KdaChunkedCore's output
// is, so the gradient flows back into its products without a copy.
class GatedRmsNormFunction : public torch::autograd::Function<GatedRmsNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& gate,
                               const torch::Tensor& w, double eps) {
    const c10::cuda::CUDAGuard guard(x.device());
    const torch::Tensor xs = x.stride(3) == 1 ? x : x.contiguous(), g = gate.contiguous(), wc = w.contiguous();
    torch::Tensor y = torch::empty_like(g);
    Check(cuda::GatedRmsNormForward(ShapeOf(xs, g), In(xs), g.data_ptr(), In(wc), static_cast<float>(eps),
                                    y.data_ptr(), c10::cuda::getCurrentCUDAStream()),
          "gated RMSNorm");
    ctx->save_for_backward({xs, g, wc});
    ctx->saved_data["eps"] = eps;
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &g = saved[1], &w = saved[2];
    const c10::cuda::CUDAGuard guard(x.device());
    const torch::Tensor dy = grads[0].to(g.scalar_type()).contiguous();
    torch::Tensor dx = torch::empty({x.size(0), x.size(2), x.size(1), x.size(3)}, x.options()).transpose(1, 2);
    torch::Tensor dgate = torch::empty_like(g), dw_rows = torch::empty({x.numel() / x.size(3), x.size(3)}, w.options());
    Check(cuda::GatedRmsNormBackward(ShapeOf(x, g, dx), In(x), g.data_ptr(), In(w),
                                     static_cast<float>(ctx->saved_data["eps"].toDouble()), dy.data_ptr(), Out(dx),
                                     dgate.data_ptr(), Out(dw_rows), c10::cuda::getCurrentCUDAStream()),
          "gated RMSNorm backward");
    return {dx, dgate, dw_rows.sum(0), torch::Tensor()};
  }

 private:
  static cuda::GatedNormRows ShapeOf(const torch::Tensor& x, const torch::Tensor& gate,
                                     const torch::Tensor& dx = torch::Tensor()) {
    cuda::GatedNormRows s;
    s.batch = x.size(0);
    s.tokens = x.size(1);
    s.heads = static_cast<int>(x.size(2));
    s.dim = static_cast<int>(x.size(3));
    for (int i = 0; i < 3; ++i) {
      s.x_strides[i] = x.stride(i);
      s.dx_strides[i] = dx.defined() ? dx.stride(i) : 0;
    }
    s.bf16 = gate.scalar_type() == torch::kBFloat16;
    return s;
  }
};

}  // namespace

bool RmsNormKernelApplies(const torch::Tensor& x) {
  return FloatOrBf16OnCuda(x) && x.dim() >= 1 && cuda::RmsNormSupports(static_cast<int>(x.size(-1)));
}

torch::Tensor RmsNormKernel(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  TORCH_CHECK(RmsNormKernelApplies(x), "RmsNormKernel: x ", x.sizes(),
              ": not fp32 or bf16 [..., D] of a supported D on a Hopper or newer GPU");
  const std::int64_t dim = x.size(-1);
  CheckKernelInputs("RmsNormKernel", {{"x", &x, {}, kFloats}, {"weight", &weight, {dim}, kFloats}});
  return RmsNormFunction::apply(x.reshape({-1, dim}), weight.to(torch::kFloat), eps)[0].view(x.sizes());
}

bool GatedRmsNormKernelApplies(const torch::Tensor& x, const torch::Tensor& gate) {
  return OnCudaInFp32(x) && FloatOrBf16OnCuda(gate) && x.dim() == 4 && gate.dim() == 3 &&
         gate.device() == x.device() && gate.size(0) == x.size(0) && gate.size(1) == x.size(1) &&
         gate.size(2) == x.size(2) * x.size(3) && x.size(2) <= std::numeric_limits<int>::max() &&
         cuda::RmsNormSupports(static_cast<int>(x.size(3)));
}

torch::Tensor GatedRmsNormKernel(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& weight,
                                 double eps) {
  TORCH_CHECK(OnCudaInFp32(x) && x.dim() == 4, "GatedRmsNormKernel: x ", x.sizes(),
              ": not fp32 [B, T, H, D] on a Hopper or newer GPU");
  CheckKernelInputs("GatedRmsNormKernel", {{"x", &x, x.sizes().vec(), kFp32},
                                           {"gate", &gate, {x.size(0), x.size(1), x.size(2) * x.size(3)}, kFloats},
                                           {"weight", &weight, {x.size(3)}, kFloats}});
  TORCH_CHECK(GatedRmsNormKernelApplies(x, gate), "GatedRmsNormKernel: x: D ", x.size(3), " is not supported");
  return GatedRmsNormFunction::apply(x, gate, weight.to(torch::kFloat).reshape({x.size(3)}), eps)[0];
}

#else  // no CUDA kernels in this build

bool RmsNormKernelApplies(const torch::Tensor&) { return false; }
bool GatedRmsNormKernelApplies(const torch::Tensor&, const torch::Tensor&) { return false; }
torch::Tensor GatedRmsNormKernel(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, double) {
  kernel_support::NoCudaKernels("GatedRmsNormKernel");
}
torch::Tensor RmsNormKernel(const torch::Tensor&, const torch::Tensor&, double) {
  kernel_support::NoCudaKernels("RmsNormKernel");
}

#endif

}  // namespace kp::runtime
