// The attention-residual depth read: autograd nodes over the kernels of
// attn_res_cuda.h, or, in a build without them, entries that say no.
#include "runtime/kernels/attn_res.h"

#ifdef KIMI_PLAN_CUDA_KERNELS
#include <algorithm>
#include <limits>

#include "runtime/kernels/kernel_support.h"
#include "runtime/kernels/attn_res_cuda.h"
#else
#include "runtime/kernels/no_kernels.h"
#endif

namespace kp::runtime {

#ifdef KIMI_PLAN_CUDA_KERNELS
namespace {

using namespace kernel_support;

// The depth read over N values [tokens, D], read in place; w = norm weight x
// query. The values are the residual stream's blocks, which autograd keeps
// anyway: saving them costs nothing.
class DepthReadFunction : public torch::autograd::Function<DepthReadFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, at::TensorList values, const torch::Tensor& w, double eps) {
    const c10::cuda::CUDAGuard guard(w.device());
    variable_list v;
    for (const torch::Tensor& t : values) v.push_back(t.contiguous());
    const torch::Tensor wc = w.contiguous();
    torch::Tensor read = torch::empty_like(v[0]);
    Check(cuda::DepthReadForward(ShapeOf(v), Pointers(v), In(wc), static_cast<float>(eps), read.data_ptr(),
                                 c10::cuda::getCurrentCUDAStream()),
          "attention-residual depth read");
    v.push_back(wc);
    ctx->save_for_backward(v);
    ctx->saved_data["eps"] = eps;
    return {read};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list v = ctx->get_saved_variables();
    const torch::Tensor w = v.back();
    v.pop_back();
    const c10::cuda::CUDAGuard guard(w.device());
    const cuda::DepthRead shape = ShapeOf(v);
    const torch::Tensor dread = grads[0].to(v[0].scalar_type()).contiguous();
    variable_list dv;
    cuda::DepthGrads dv_at;
    for (std::size_t i = 0; i < v.size(); ++i) {
      dv.push_back(torch::empty_like(v[i]));
      dv_at.at[i] = dv.back().data_ptr();
    }
    torch::Tensor dw_rows = torch::empty({shape.tokens, shape.dim}, w.options());
    Check(cuda::DepthReadBackward(shape, Pointers(v), In(w), static_cast<float>(ctx->saved_data["eps"].toDouble()),
                                  dread.data_ptr(), dv_at, Out(dw_rows), c10::cuda::getCurrentCUDAStream()),
          "attention-residual depth read backward");
    dv.push_back(dw_rows.sum(0));
    dv.emplace_back();  // eps
    return dv;
  }

 private:
  static cuda::DepthRead ShapeOf(const variable_list& v) {
    const std::int64_t dim = v[0].size(-1);
    return {static_cast<int>(v.size()), v[0].numel() / dim, static_cast<int>(dim),
            v[0].scalar_type() == torch::kBFloat16};
  }
  static cuda::DepthValues Pointers(const variable_list& v) {
    cuda::DepthValues p;
    for (std::size_t i = 0; i < v.size(); ++i) p.at[i] = v[i].data_ptr();
    return p;
  }
};

}  // namespace

bool AttnResKernelApplies(const std::vector<torch::Tensor>& values) {
  if (values.empty()) return false;
  const auto dtype = values[0].scalar_type();
  if (!FloatOrBf16OnCuda(values[0])) return false;
  for (const torch::Tensor& v : values)
    if (v.scalar_type() != dtype || v.sizes() != values[0].sizes() || v.device() != values[0].device()) return false;
  return cuda::DepthReadSupports(static_cast<int>(values.size()), static_cast<int>(values[0].size(-1)));
}

torch::Tensor AttnResReadKernel(const std::vector<torch::Tensor>& values, const torch::Tensor& norm_weight,
                                const torch::Tensor& query, double eps) {
  TORCH_CHECK(AttnResKernelApplies(values), "AttnResReadKernel: values: not 1 to 16 fp32 or bf16 tensors of one shape ",
              "[..., D] (D a multiple of 32) on one Hopper or newer GPU");
  const std::int64_t d = values[0].size(-1);
  CheckKernelInputs("AttnResReadKernel", {{"values[0]", &values[0], {}, kFloats},
                                          {"norm_weight", &norm_weight, {d}, kFloats},
                                          {"query", &query, {d}, kFloats}});
  const torch::Tensor w = (norm_weight * query).to(torch::kFloat);
  return DepthReadFunction::apply(at::TensorList(values), w, eps)[0];
}

#else  // no CUDA kernels in this build

bool AttnResKernelApplies(const std::vector<torch::Tensor>&) { return false; }
torch::Tensor AttnResReadKernel(const std::vector<torch::Tensor>&, const torch::Tensor&, const torch::Tensor&, double) {
  kernel_support::NoCudaKernels("AttnResReadKernel");
}

#endif

}  // namespace kp::runtime
