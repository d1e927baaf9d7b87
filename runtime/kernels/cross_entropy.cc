// The loss's cross entropy from logits, and the LM head with the loss a chunk
// of rows at a time: autograd nodes over the kernels of cross_entropy_cuda.h,
// or, in a build without them, entries that say no.
#include "runtime/kernels/cross_entropy.h"

#ifdef KIMI_PLAN_CUDA_KERNELS
#include <algorithm>
#include <limits>

#include "runtime/kernels/kernel_support.h"
#include "runtime/kernels/cross_entropy_cuda.h"
#else
#include "runtime/kernels/no_kernels.h"
#endif

namespace kp::runtime {

#ifdef KIMI_PLAN_CUDA_KERNELS
namespace {

using namespace kernel_support;

class CrossEntropyFunction : public torch::autograd::Function<CrossEntropyFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& targets) {
    const c10::cuda::CUDAGuard guard(logits.device());
    const torch::Tensor x = logits.contiguous(), t = targets.contiguous();
    const auto fp32 = x.options().dtype(torch::kFloat);
    torch::Tensor loss = torch::empty({x.size(0)}, fp32), lse = torch::empty({x.size(0)}, fp32);
    Check(cuda::CrossEntropyForward(ShapeOf(x), x.data_ptr(), t.data_ptr<std::int64_t>(), Out(loss), Out(lse),
                                    c10::cuda::getCurrentCUDAStream()),
          "cross entropy");
    ctx->save_for_backward({x, t, lse});
    return {loss};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &t = saved[1], &lse = saved[2];
    const c10::cuda::CUDAGuard guard(x.device());
    const torch::Tensor dloss = grads[0].to(torch::kFloat).contiguous();
    torch::Tensor dx = torch::empty_like(x);
    Check(cuda::CrossEntropyBackward(ShapeOf(x), x.data_ptr(), t.data_ptr<std::int64_t>(), In(lse), In(dloss),
                                     dx.data_ptr(), c10::cuda::getCurrentCUDAStream()),
          "cross entropy backward");
    return {dx, {}};
  }

 private:
  static cuda::LogitRows ShapeOf(const torch::Tensor& x) {
    return {x.size(0), x.size(1), x.scalar_type() == torch::kBFloat16};
  }
};

// Logits a chunk of LinearCrossEntropyFunction holds when the caller leaves
// it to us: 2^26 (128 MB in bf16, with as much again for their gradient).
constexpr std::int64_t kLogitsPerChunk = std::int64_t{1} << 26;

class LinearCrossEntropyFunction : public torch::autograd::Function<LinearCrossEntropyFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& targets, std::int64_t rows_per_chunk) {
    const c10::cuda::CUDAGuard guard(x.device());
    const torch::Tensor xc = x.contiguous(), t = targets.contiguous();
    const torch::Tensor w = weight.to(xc.scalar_type()).contiguous();
    const std::int64_t n = xc.size(0), vocab = w.size(0);
    const auto fp32 = xc.options().dtype(torch::kFloat);
    torch::Tensor loss = torch::empty({n}, fp32), dx = torch::empty_like(xc), dw = torch::zeros(w.sizes(), fp32);
    const std::int64_t step = rows_per_chunk > 0 ? rows_per_chunk : std::max<std::int64_t>(1, kLogitsPerChunk / vocab);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    for (std::int64_t r = 0; r < n; r += step) {
      const std::int64_t rows = std::min(step, n - r);
      const torch::Tensor xr = xc.narrow(0, r, rows);
      const torch::Tensor logits = torch::mm(xr, w.t());
      const torch::Tensor dloss = torch::ones({rows}, fp32);
      torch::Tensor lse = torch::empty({rows}, fp32), dlogits = torch::empty_like(logits);
      const cuda::LogitRows shape{rows, vocab, xc.scalar_type() == torch::kBFloat16};
      const std::int64_t* tr = t.data_ptr<std::int64_t>() + r;
      Check(cuda::CrossEntropyForward(shape, logits.data_ptr(), tr, loss.data_ptr<float>() + r, Out(lse), stream),
            "linear cross entropy");
      Check(cuda::CrossEntropyBackward(shape, logits.data_ptr(), tr, In(lse), In(dloss), dlogits.data_ptr(), stream),
            "linear cross entropy gradient");
      torch::Tensor dx_rows = dx.narrow(0, r, rows);
      torch::mm_out(dx_rows, dlogits, w);
      dw.add_(torch::mm(dlogits.t(), xr));
    }
    ctx->save_for_backward({dx, dw});
    return {loss.sum()};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &dx = saved[0], &dw = saved[1];
    const torch::Tensor g = grads[0].to(torch::kFloat);
    // The scale in fp32, then one rounding to x's dtype.
    return {(dx.to(torch::kFloat) * g).to(dx.scalar_type()), dw * g, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool CrossEntropyKernelApplies(const torch::Tensor& logits) {
  return FloatOrBf16OnCuda(logits) && logits.dim() == 2 && logits.size(1) > 0;
}

torch::Tensor CrossEntropyKernel(const torch::Tensor& logits, const torch::Tensor& targets) {
  TORCH_CHECK(CrossEntropyKernelApplies(logits), "CrossEntropyKernel: logits ", logits.sizes(),
              ": not fp32 or bf16 [N, V] on a Hopper or newer GPU");
  CheckKernelInputs("CrossEntropyKernel", {{"logits", &logits, {logits.size(0), logits.size(1)}, kFloats},
                                           {"targets", &targets, {logits.size(0)}, {torch::kLong}}});
  return CrossEntropyFunction::apply(logits, targets)[0];
}

bool LinearCrossEntropyKernelApplies(const torch::Tensor& x, const torch::Tensor& weight) {
  return FloatOrBf16OnCuda(x) && x.dim() == 2 && weight.dim() == 2 && weight.size(1) == x.size(1) &&
         weight.size(0) > 0 && (weight.scalar_type() == torch::kFloat || weight.scalar_type() == torch::kBFloat16) &&
         weight.device() == x.device();
}

torch::Tensor LinearCrossEntropyKernel(const torch::Tensor& x, const torch::Tensor& weight,
                                       const torch::Tensor& targets, std::int64_t rows_per_chunk) {
  TORCH_CHECK(FloatOrBf16OnCuda(x) && x.dim() == 2, "LinearCrossEntropyKernel: x ", x.sizes(),
              ": not fp32 or bf16 [N, D] on a Hopper or newer GPU");
  CheckKernelInputs("LinearCrossEntropyKernel", {{"x", &x, {x.size(0), x.size(1)}, kFloats},
                                                 {"weight", &weight, {kAnySize, x.size(1)}, kFloats},
                                                 {"targets", &targets, {x.size(0)}, {torch::kLong}}});
  TORCH_CHECK(LinearCrossEntropyKernelApplies(x, weight), "LinearCrossEntropyKernel: weight: an empty vocabulary");
  return LinearCrossEntropyFunction::apply(x, weight, targets, rows_per_chunk)[0];
}

#else  // no CUDA kernels in this build

bool LinearCrossEntropyKernelApplies(const torch::Tensor&, const torch::Tensor&) { return false; }
torch::Tensor LinearCrossEntropyKernel(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, std::int64_t) {
  kernel_support::NoCudaKernels("LinearCrossEntropyKernel");
}
bool CrossEntropyKernelApplies(const torch::Tensor&) { return false; }
torch::Tensor CrossEntropyKernel(const torch::Tensor&, const torch::Tensor&) {
  kernel_support::NoCudaKernels("CrossEntropyKernel");
}

#endif

}  // namespace kp::runtime
