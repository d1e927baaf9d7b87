// KDA's inputs from its projections: the short convolution with its norms, and
// the forget gate's in-chunk cumulative log decay, chunked: autograd nodes over
// the kernels of kda_prep_cuda.h, or, in a build without them, entries that say
// no.
#include "runtime/kernels/kda_prep.h"

#ifdef KIMI_PLAN_CUDA_KERNELS
#include <algorithm>
#include <limits>

#include "runtime/kernels/kernel_support.h"
#include "runtime/kernels/kda_prep_cuda.h"
#else
#include "runtime/kernels/no_kernels.h"
#endif

namespace kp::runtime {

#ifdef KIMI_PLAN_CUDA_KERNELS
namespace {

using namespace kernel_support;

// KDA's chunked inputs from [B, T, heads * dim] projection rows.
cuda::KdaPrepShape PrepShapeOf(const torch::Tensor& x, std::int64_t heads, std::int64_t chunk, std::int64_t width) {
  return {x.size(0), x.size(1), static_cast<int>(heads), static_cast<int>(x.size(2) / heads), static_cast<int>(chunk),
          static_cast<int>(width), x.scalar_type() == torch::kBFloat16};
}

std::vector<std::int64_t> ChunkedShape(const cuda::KdaPrepShape& s) {
  return {s.batch, s.heads, (s.tokens + s.chunk - 1) / s.chunk, s.chunk, s.dim};
}

class ShortConvFunction : public torch::autograd::Function<ShortConvFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               std::int64_t heads, std::int64_t chunk, bool l2, double scale, double eps) {
    const c10::cuda::CUDAGuard guard(x.device());
    const torch::Tensor xc = x.contiguous(), wc = w.contiguous();
    const cuda::KdaPrepShape shape = PrepShapeOf(xc, heads, chunk, wc.size(1));
    torch::Tensor out = torch::empty(ChunkedShape(shape), wc.options());
    Check(cuda::ShortConvForward(shape, xc.data_ptr(), In(wc), l2, static_cast<float>(scale), static_cast<float>(eps),
                                 Out(out), c10::cuda::getCurrentCUDAStream()),
          "KDA short convolution");
    ctx->save_for_backward({xc, wc});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["l2"] = l2;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["eps"] = eps;
    return {out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1];
    const c10::cuda::CUDAGuard guard(x.device());
    const cuda::KdaPrepShape shape =
        PrepShapeOf(x, ctx->saved_data["heads"].toInt(), ctx->saved_data["chunk"].toInt(), w.size(1));
    const torch::Tensor dout = grads[0].contiguous();
    torch::Tensor scratch = torch::empty(x.sizes(), w.options()), dx = torch::empty_like(x),
                  dw_partial = torch::empty({cuda::ShortConvTiles(shape), w.size(0), w.size(1)}, w.options());
    Check(cuda::ShortConvBackward(shape, x.data_ptr(), In(w), ctx->saved_data["l2"].toBool(),
                                  static_cast<float>(ctx->saved_data["scale"].toDouble()),
                                  static_cast<float>(ctx->saved_data["eps"].toDouble()), In(dout), Out(scratch),
                                  dx.data_ptr(), Out(dw_partial), c10::cuda::getCurrentCUDAStream()),
          "KDA short convolution backward");
    return {dx, dw_partial.sum(0), {}, {}, {}, {}, {}};
  }
};

class GateCumFunction : public torch::autograd::Function<GateCumFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& f, const torch::Tensor& a_log,
                               const torch::Tensor& dt_bias, std::int64_t heads, std::int64_t chunk) {
    const c10::cuda::CUDAGuard guard(f.device());
    const torch::Tensor fc = f.contiguous(), ac = a_log.contiguous(), dc = dt_bias.contiguous();
    const cuda::KdaPrepShape shape = PrepShapeOf(fc, heads, chunk, 1);
    torch::Tensor cum = torch::empty(ChunkedShape(shape), ac.options());
    Check(cuda::GateCumForward(shape, fc.data_ptr(), In(ac), In(dc), Out(cum), c10::cuda::getCurrentCUDAStream()),
          "KDA forget gate");
    ctx->save_for_backward({fc, ac, dc});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["chunk"] = chunk;
    return {cum};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &f = saved[0], &a_log = saved[1], &dt_bias = saved[2];
    const c10::cuda::CUDAGuard guard(f.device());
    const cuda::KdaPrepShape shape = PrepShapeOf(f, ctx->saved_data["heads"].toInt(), ctx->saved_data["chunk"].toInt(), 1);
    const std::int64_t rows = shape.batch * ((shape.tokens + shape.chunk - 1) / shape.chunk);
    const torch::Tensor dcum = grads[0].contiguous();
    torch::Tensor df = torch::empty_like(f), ddt = torch::empty({rows, f.size(2)}, dt_bias.options()),
                  dalog = torch::empty({rows, f.size(2)}, dt_bias.options());
    Check(cuda::GateCumBackward(shape, f.data_ptr(), In(a_log), In(dt_bias), In(dcum), df.data_ptr(), Out(ddt),
                                Out(dalog), c10::cuda::getCurrentCUDAStream()),
          "KDA forget gate backward");
    return {df, dalog.view({rows, shape.heads, shape.dim}).sum(at::IntArrayRef{0, 2}), ddt.sum(0), {}, {}};
  }
};

}  // namespace

bool KdaPrepKernelsApply(const torch::Tensor& x, std::int64_t dim, std::int64_t conv_width) {
  return FloatOrBf16OnCuda(x) && x.dim() == 3 && dim > 0 && x.size(2) % dim == 0 &&
         cuda::KdaPrepSupports(static_cast<int>(dim), static_cast<int>(conv_width), 1);
}

torch::Tensor KdaShortConvChunked(const torch::Tensor& x, const torch::Tensor& weight, std::int64_t heads,
                                  std::int64_t chunk, bool l2, double scale, double eps) {
  TORCH_CHECK(heads > 0 && chunk > 0 && x.dim() == 3 && x.size(2) % heads == 0, "KdaShortConvChunked: x ", x.sizes(),
              " in ", heads, " heads, chunk ", chunk, ": not [B, T, heads x dim]");
  CheckKernelInputs("KdaShortConvChunked",
                    {{"x", &x, x.sizes().vec(), kFloats}, {"weight", &weight, {x.size(2), kAnySize}, kFloats}});
  TORCH_CHECK(KdaPrepKernelsApply(x, x.size(2) / heads, weight.size(1)), "KdaShortConvChunked: x ", x.sizes(),
              " with a convolution of width ", weight.size(1), ": not a supported shape on a Hopper or newer GPU");
  return ShortConvFunction::apply(x, weight.to(torch::kFloat), heads, chunk, l2, scale, eps)[0];
}

torch::Tensor KdaGateCumChunked(const torch::Tensor& f, const torch::Tensor& a_log, const torch::Tensor& dt_bias,
                                std::int64_t heads, std::int64_t chunk) {
  TORCH_CHECK(heads > 0 && chunk > 0 && f.dim() == 3 && f.size(2) % heads == 0, "KdaGateCumChunked: f ", f.sizes(),
              " in ", heads, " heads, chunk ", chunk, ": not [B, T, heads x dim]");
  CheckKernelInputs("KdaGateCumChunked", {{"f", &f, f.sizes().vec(), kFloats},
                                          {"a_log", &a_log, {heads}, kFloats},
                                          {"dt_bias", &dt_bias, {f.size(2)}, kFloats}});
  TORCH_CHECK(KdaPrepKernelsApply(f, f.size(2) / heads, 1), "KdaGateCumChunked: f ", f.sizes(),
              ": not a supported shape on a Hopper or newer GPU");
  return GateCumFunction::apply(f, a_log.to(torch::kFloat).reshape({heads}),
                                dt_bias.to(torch::kFloat).reshape({f.size(2)}), heads, chunk)[0];
}

#else  // no CUDA kernels in this build

bool KdaPrepKernelsApply(const torch::Tensor&, std::int64_t, std::int64_t) { return false; }
torch::Tensor KdaShortConvChunked(const torch::Tensor&, const torch::Tensor&, std::int64_t, std::int64_t, bool, double,
                                  double) {
  kernel_support::NoCudaKernels("KdaShortConvChunked");
}
torch::Tensor KdaGateCumChunked(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, std::int64_t,
                                std::int64_t) {
  kernel_support::NoCudaKernels("KdaGateCumChunked");
}

#endif

}  // namespace kp::runtime
