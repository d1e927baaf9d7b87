// The MoE's weighted combination of expert rows: autograd nodes over the
// kernels of moe_combine_cuda.h, or, in a build without them, entries that say
// no.
#include "runtime/kernels/moe_combine.h"

#ifdef KIMI_PLAN_CUDA_KERNELS
#include <algorithm>
#include <limits>

#include "runtime/kernels/kernel_support.h"
#include "runtime/kernels/moe_combine_cuda.h"
#else
#include "runtime/kernels/no_kernels.h"
#endif

namespace kp::runtime {

#ifdef KIMI_PLAN_CUDA_KERNELS
namespace {

using namespace kernel_support;

class MoeCombineFunction : public torch::autograd::Function<MoeCombineFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& rows, const torch::Tensor& row_of,
                               const torch::Tensor& weights) {
    const c10::cuda::CUDAGuard guard(rows.device());
    const torch::Tensor r = rows.contiguous(), pos = row_of.contiguous(), w = weights.contiguous();
    torch::Tensor y = torch::empty({w.size(0), r.size(1)}, r.options());
    Check(cuda::MoeCombineForward(ShapeOf(r, w), r.data_ptr(), pos.data_ptr<std::int64_t>(), In(w), y.data_ptr(),
                                  c10::cuda::getCurrentCUDAStream()),
          "MoE combine");
    ctx->save_for_backward({r, pos, w});
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &r = saved[0], &pos = saved[1], &w = saved[2];
    const c10::cuda::CUDAGuard guard(r.device());
    const torch::Tensor dy = grads[0].to(r.scalar_type()).contiguous();
    torch::Tensor drows = torch::empty_like(r), dweights = torch::empty_like(w);
    Check(cuda::MoeCombineBackward(ShapeOf(r, w), r.data_ptr(), pos.data_ptr<std::int64_t>(), In(w), dy.data_ptr(),
                                   drows.data_ptr(), Out(dweights), c10::cuda::getCurrentCUDAStream()),
          "MoE combine backward");
    return {drows, {}, dweights};
  }

 private:
  static cuda::MoeCombineShape ShapeOf(const torch::Tensor& rows, const torch::Tensor& w) {
    return {w.size(0), static_cast<int>(w.size(1)), static_cast<int>(rows.size(1)),
            rows.scalar_type() == torch::kBFloat16};
  }
};

}  // namespace

bool MoeCombineKernelApplies(const torch::Tensor& rows, std::int64_t k) {
  return FloatOrBf16OnCuda(rows) && rows.dim() == 2 && rows.size(0) % k == 0 &&
         cuda::MoeCombineSupports(static_cast<int>(k), static_cast<int>(rows.size(1)));
}

torch::Tensor MoeCombineKernel(const torch::Tensor& rows, const torch::Tensor& row_of, const torch::Tensor& weights) {
  TORCH_CHECK(weights.dim() == 2 && MoeCombineKernelApplies(rows, weights.size(1)), "MoeCombineKernel: rows ",
              rows.sizes(), " and weights ", weights.sizes(),
              ": not fp32 or bf16 rows [N k, D] of a supported D and k on a Hopper or newer GPU and weights [N, k]");
  CheckKernelInputs("MoeCombineKernel", {{"rows", &rows, {weights.numel(), rows.size(1)}, kFloats},
                                         {"row_of", &row_of, {rows.size(0)}, {torch::kLong}},
                                         {"weights", &weights, {weights.size(0), weights.size(1)}, kFp32}});
  return MoeCombineFunction::apply(rows, row_of, weights)[0];
}

#else  // no CUDA kernels in this build

bool MoeCombineKernelApplies(const torch::Tensor&, std::int64_t) { return false; }
torch::Tensor MoeCombineKernel(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) {
  kernel_support::NoCudaKernels("MoeCombineKernel");
}

#endif

}  // namespace kp::runtime
