// KDA: the intra-chunk products, the chunk scan, the chunked core after the
// intra-chunk products and the recurrent steps of a decode: autograd nodes over
// the kernels of kda_cuda.h, kda_prep_cuda.h, or, in a build without them,
// entries that say no.
#include "runtime/kernels/kda.h"

#ifdef KIMI_PLAN_CUDA_KERNELS
#include <algorithm>
#include <limits>

#include "runtime/kernels/batched_gemm.h"
#include "runtime/kernels/kernel_support.h"
#include "runtime/kernels/kda_cuda.h"
#include "runtime/kernels/kda_prep_cuda.h"
#else
#include "runtime/kernels/no_kernels.h"
#endif

namespace kp::runtime {

#ifdef KIMI_PLAN_CUDA_KERNELS
namespace {

using namespace kernel_support;

// The scan and recurrent kernels put batch x heads on the grid's y axis.
constexpr std::int64_t kMaxGridY = 65535;

cuda::KdaChunks ChunksOf(const torch::Tensor& q) {
  return {q.numel() / (q.size(-2) * q.size(-1)), static_cast<int>(q.size(-2)), static_cast<int>(q.size(-1))};
}

// [..., C, dk] -> [..., C, C]
std::vector<std::int64_t> SquareShape(const torch::Tensor& q) {
  auto shape = q.sizes().vec();
  shape.back() = q.size(-2);
  return shape;
}

// scale a b (+ into, in place, when given): TF32 on tensor cores where
// `math` asks for them and the batched kernel takes the operands, else fp32
// (a bf16 b, the chunk-start states, widened).
torch::Tensor Product(KdaMath math, const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& into = {},
                      float scale = 1.f) {
  if (math == KdaMath::kTensorCores && BatchedMatmulTf32Applies(a, b)) return BatchedMatmulTf32(a, b, into, scale);
  torch::Tensor p = torch::matmul(a, b.to(a.scalar_type()));
  if (scale != 1.f) p.mul_(scale);
  return into.defined() ? into.add_(p) : p;
}

class KdaIntraFunction : public torch::autograd::Function<KdaIntraFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& g_cum) {
    const c10::cuda::CUDAGuard guard(q.device());
    const torch::Tensor qc = q.contiguous(), kc = k.contiguous(), gc = g_cum.contiguous();
    torch::Tensor a = torch::empty(SquareShape(qc), qc.options()), p = torch::empty(SquareShape(qc), qc.options());
    Check(cuda::KdaIntraForward(ChunksOf(qc), In(qc), In(kc), In(gc), Out(a), Out(p),
                                c10::cuda::getCurrentCUDAStream()),
          "KDA intra-chunk forward");
    ctx->save_for_backward({qc, kc, gc});
    return {a, p};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &g = saved[2];
    const c10::cuda::CUDAGuard guard(q.device());
    auto grad_or_zero = [&](const torch::Tensor& t) {
      return t.defined() ? t.contiguous() : torch::zeros(SquareShape(q), q.options());
    };
    const torch::Tensor da = grad_or_zero(grads[0]), dp = grad_or_zero(grads[1]);
    torch::Tensor dq = torch::empty_like(q), dk = torch::empty_like(k), dg = torch::empty_like(g);
    Check(cuda::KdaIntraBackward(ChunksOf(q), In(q), In(k), In(g), In(da), In(dp), Out(dq), Out(dk), Out(dg),
                                 c10::cuda::getCurrentCUDAStream()),
          "KDA intra-chunk backward");
    return {dq, dk, dg};
  }
};

// The scan's shape over x [B, H, n, C, dv] and b [B, H, n, C, dk] (the
// scan's a and b, then its c and d); on tensor cores where `math` asks for
// them and they take the shape and these inputs.
cuda::KdaScan ScanOf(const torch::Tensor& x, const torch::Tensor& b, const torch::Tensor& c,
                     const torch::Tensor& d, KdaMath math) {
  cuda::KdaScan s{x.size(0) * x.size(1), static_cast<int>(x.size(2)), static_cast<int>(x.size(3)),
                  static_cast<int>(b.size(4)), static_cast<int>(x.size(4))};
  s.tensor_cores = math == KdaMath::kTensorCores &&
                   cuda::KdaScanTensorCoresTake(s.chunk, s.dk, s.dv, In(x), In(b), In(c), In(d));
  return s;
}

// The chunk scan (KdaStateScan) on contiguous fp32 tensors: {u, starts,
// last}; `starts` in bf16 where `bf16_states` and the scan runs on tensor
// cores.
variable_list ScanForward(const torch::Tensor& w, const torch::Tensor& y, const torch::Tensor& k_to_end,
                          const torch::Tensor& decay, const torch::Tensor& s0, KdaMath math, bool bf16_states) {
  const std::int64_t b = w.size(0), h = w.size(1), n = w.size(2), dk = y.size(4), dv = w.size(4);
  cuda::KdaScan shape = ScanOf(w, y, k_to_end, decay, math);
  shape.states_bf16 = shape.tensor_cores && bf16_states;
  torch::Tensor u = torch::empty_like(w), last = torch::empty({b, h, dk, dv}, w.options()),
                starts = torch::empty({b, h, n, dk, dv},
                                      w.options().dtype(shape.states_bf16 ? torch::kBFloat16 : torch::kFloat));
  Check(cuda::KdaChunkScan(shape, /*reverse=*/false, /*sign_bs=*/-1.f, /*sign_cx=*/1.f, In(w), In(y), In(k_to_end),
                           In(decay), nullptr, In(s0), Out(u), starts.data_ptr(), Out(last),
                           c10::cuda::getCurrentCUDAStream()),
        "KDA chunk scan");
  return {u, starts, last};
}

// The scan's gradients {dw, dy, dk_to_end, ddecay, ds0} from its saved
// tensors (`starts` fp32 or bf16) and the gradients of {u, starts, last}
// (any may be undefined).
variable_list ScanBackward(const torch::Tensor& y, const torch::Tensor& k, const torch::Tensor& decay,
                           const torch::Tensor& u, const torch::Tensor& saved_starts, const torch::Tensor& du_in,
                           const torch::Tensor& dstarts_in, const torch::Tensor& dlast_in, KdaMath math) {
  const torch::Tensor du = du_in.defined() ? du_in.contiguous() : torch::zeros_like(u);
  const torch::Tensor dstarts = dstarts_in.defined() ? dstarts_in.contiguous() : torch::Tensor();
  const torch::Tensor dlast = dlast_in.defined() ? dlast_in.contiguous() : torch::Tensor();
  // The same recurrence on the gradients, last chunk first: x = dU + K dS
  // is U's whole gradient, `starts` the gradient of each chunk's end state
  // (`dends`, in the forward states' type). On tensor cores the kernel also
  // sums starts_i * dends_i over each 64 columns (the decays' gradient)
  // while dends_i is in its registers.
  cuda::KdaScan shape = ScanOf(du, k, y, decay, math);
  const torch::Tensor starts = shape.tensor_cores ? saved_starts : saved_starts.to(torch::kFloat);
  shape.states_bf16 = starts.scalar_type() == torch::kBFloat16;
  torch::Tensor du_total = torch::empty_like(u), dends = torch::empty_like(starts),
                ds0 = torch::empty({u.size(0), u.size(1), y.size(4), u.size(4)}, u.options()), decay_dots;
  if (shape.tensor_cores)
    decay_dots = torch::empty({u.size(0), u.size(1), u.size(2), y.size(4), u.size(4) / 64}, u.options());
  Check(cuda::KdaChunkScan(shape, /*reverse=*/true, /*sign_bs=*/1.f, /*sign_cx=*/-1.f, In(du), In(k), In(y),
                           In(decay), InOrNull(dstarts), InOrNull(dlast), Out(du_total), dends.data_ptr(), Out(ds0),
                           c10::cuda::getCurrentCUDAStream(), shape.tensor_cores ? starts.data_ptr() : nullptr,
                           shape.tensor_cores ? Out(decay_dots) : nullptr),
        "KDA chunk scan backward");
  const torch::Tensor dy = Product(math, du_total, starts.transpose(-1, -2), {}, -1.f);
  const torch::Tensor dk = Product(math, u, dends.transpose(-1, -2));
  const torch::Tensor ddecay = shape.tensor_cores ? decay_dots.sum(-1) : (starts * dends).sum(-1);
  return {du_total, dy, dk, ddecay, ds0};
}

void SaveMath(AutogradContext* ctx, KdaMath math) {
  ctx->saved_data["tensor_cores"] = math == KdaMath::kTensorCores;
}
KdaMath SavedMath(AutogradContext* ctx) {
  return ctx->saved_data["tensor_cores"].toBool() ? KdaMath::kTensorCores : KdaMath::kFp32;
}

class KdaScanFunction : public torch::autograd::Function<KdaScanFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& w, const torch::Tensor& y,
                               const torch::Tensor& k_to_end, const torch::Tensor& decay, const torch::Tensor& s0,
                               KdaMath math) {
    const c10::cuda::CUDAGuard guard(w.device());
    const torch::Tensor yc = y.contiguous(), kc = k_to_end.contiguous(), dc = decay.contiguous();
    variable_list out = ScanForward(w.contiguous(), yc, kc, dc, s0.contiguous(), math, /*bf16_states=*/false);
    ctx->save_for_backward({yc, kc, dc, out[0], out[1]});
    SaveMath(ctx, math);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const c10::cuda::CUDAGuard guard(saved[3].device());
    variable_list d = ScanBackward(saved[0], saved[1], saved[2], saved[3], saved[4], grads[0], grads[1], grads[2],
                                   SavedMath(ctx));
    d.emplace_back();  // math
    return d;
  }
};

cuda::KdaChunkProducts ProductsShapeOf(const torch::Tensor& q, const torch::Tensor& v) {
  return {q.size(0) * q.size(1) * q.size(2), static_cast<int>(q.size(3)), static_cast<int>(q.size(4)),
          static_cast<int>(v.size(4))};
}

// The chunk products of contiguous {q, k, v, g_cum, beta}:
// {q e^G, beta k e^G, k e^{G_C - G}, beta v, e^{G_C}}.
variable_list ProductsForward(const variable_list& in) {
  const torch::Tensor &q = in[0], &v = in[2];
  torch::Tensor qd = torch::empty_like(q), kb = torch::empty_like(q), ke = torch::empty_like(q),
                vb = torch::empty_like(v), decay = torch::empty({q.size(0), q.size(1), q.size(2), q.size(4)}, q.options());
  Check(cuda::KdaChunkProductsForward(ProductsShapeOf(q, v), In(q), In(in[1]), In(v), In(in[3]), In(in[4]), Out(qd),
                                      Out(kb), Out(ke), Out(vb), Out(decay), c10::cuda::getCurrentCUDAStream()),
        "KDA chunk products");
  return {qd, kb, ke, vb, decay};
}

// The products' input gradients from their inputs and the gradients of the
// five products (any may be undefined: zero).
variable_list ProductsBackward(const variable_list& in, const variable_list& grads) {
  const torch::Tensor &q = in[0], &k = in[1], &v = in[2], &g = in[3], &beta = in[4];
  const std::vector<torch::Tensor> like = {q, q, q, v};
  std::vector<torch::Tensor> d(5);
  for (int i = 0; i < 4; ++i) d[i] = grads[i].defined() ? grads[i].contiguous() : torch::zeros_like(like[i]);
  d[4] = grads[4].defined() ? grads[4].contiguous()
                            : torch::zeros({q.size(0), q.size(1), q.size(2), q.size(4)}, q.options());
  torch::Tensor dq = torch::empty_like(q), dk = torch::empty_like(k), dv = torch::empty_like(v),
                dg = torch::empty_like(g), dbeta = torch::empty_like(beta);
  Check(cuda::KdaChunkProductsBackward(ProductsShapeOf(q, v), In(q), In(k), In(v), In(g), In(beta), In(d[0]),
                                       In(d[1]), In(d[2]), In(d[3]), In(d[4]), Out(dq), Out(dk), Out(dv), Out(dg),
                                       Out(dbeta), c10::cuda::getCurrentCUDAStream()),
        "KDA chunk products backward");
  return {dq, dk, dv, dg, dbeta};
}

class ChunkProductsFunction : public torch::autograd::Function<ChunkProductsFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& g_cum, const torch::Tensor& beta) {
    const c10::cuda::CUDAGuard guard(q.device());
    const variable_list in = {q.contiguous(), k.contiguous(), v.contiguous(), g_cum.contiguous(), beta.contiguous()};
    ctx->save_for_backward(in);
    return ProductsForward(in);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const c10::cuda::CUDAGuard guard(saved[0].device());
    return ProductsBackward(saved, grads);
  }
};

// KdaChunkedCore after the intra-chunk products and the inverse, as one
// node: the chunk products, the UT transform's two products, the scan and
// the output. It keeps its inputs, u and the chunk-start states; the
// backward makes the products and y again (one elementwise pass and one
// small batched product) instead of keeping five [B, H, n, C, d] tensors.
class KdaChunkCoreFunction : public torch::autograd::Function<KdaChunkCoreFunction> {
 public:
  // inputs: q, k, v, g_cum, beta (the products' inputs), inverse and qk
  // [B, H, n, C, C], s0 [B, H, dk, dv].
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& g_cum, const torch::Tensor& beta,
                               const torch::Tensor& inverse, const torch::Tensor& qk, const torch::Tensor& s0,
                               KdaMath math) {
    const c10::cuda::CUDAGuard guard(q.device());
    const variable_list in = {q.contiguous(), k.contiguous(), v.contiguous(), g_cum.contiguous(), beta.contiguous()};
    const variable_list p = ProductsForward(in);  // q e^G, beta k e^G, k e^{G_C - G}, beta v, e^{G_C}
    const torch::Tensor w = Product(math, inverse, p[3]), y = Product(math, inverse, p[1]);
    // u, starts (bf16 on tensor cores: read only by the products), last
    const variable_list scan = ScanForward(w, y, p[2], p[4], s0.contiguous(), math, /*bf16_states=*/true);
    const torch::Tensor out = Product(math, qk, scan[0], Product(math, p[0], scan[1]));
    variable_list keep = in;
    keep.insert(keep.end(), {inverse, qk, scan[0], scan[1]});
    ctx->save_for_backward(keep);
    SaveMath(ctx, math);
    return {out, scan[2]};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const variable_list in(saved.begin(), saved.begin() + 5);
    const torch::Tensor &inverse = saved[5], &qk = saved[6], &u = saved[7], &starts = saved[8];
    const c10::cuda::CUDAGuard guard(u.device());
    const KdaMath math = SavedMath(ctx);
    const variable_list p = ProductsForward(in);
    const torch::Tensor y = Product(math, inverse, p[1]);
    const torch::Tensor dout = grads[0].defined() ? grads[0].contiguous()
                                                  : torch::zeros({u.size(0), u.size(1), u.size(2), u.size(3),
                                                                  u.size(4)}, u.options());
    auto t = [](const torch::Tensor& x) { return x.transpose(-1, -2); };
    // out = Qd starts + qk u
    const torch::Tensor dq_decayed = Product(math, dout, t(starts)), dstarts = Product(math, t(p[0]), dout);
    const torch::Tensor dqk = Product(math, dout, t(u)), du = Product(math, t(qk), dout);
    // dw, dy, dk_to_end, ddecay, ds0
    const variable_list ds = ScanBackward(y, p[2], p[4], u, starts, du, dstarts, grads[1], math);
    // w = inverse (beta v), y = inverse (beta k e^G)
    const torch::Tensor dinverse = Product(math, ds[1], t(p[1]), Product(math, ds[0], t(p[3])));
    const torch::Tensor dv_beta = Product(math, t(inverse), ds[0]), dk_beta = Product(math, t(inverse), ds[1]);
    variable_list d = ProductsBackward(in, {dq_decayed, dk_beta, ds[2], dv_beta, ds[3]});
    d.insert(d.end(), {dinverse, dqk, ds[4], torch::Tensor()});  // the last: math
    return d;
  }
};

}  // namespace

bool KdaScanKernelApplies(const torch::Tensor& w, const torch::Tensor& y) {
  return OnCudaInFp32(w) && w.dim() == 5 && y.dim() == 5 && w.size(0) * w.size(1) <= kMaxGridY &&
         cuda::KdaScanSupports(static_cast<int>(w.size(3)), static_cast<int>(y.size(4)), static_cast<int>(w.size(4)));
}

KdaScanResult KdaStateScan(const torch::Tensor& w, const torch::Tensor& y, const torch::Tensor& k_to_end,
                           const torch::Tensor& decay, const torch::Tensor& s0, KdaMath math) {
  TORCH_CHECK(KdaScanKernelApplies(w, y), "KdaStateScan: w ", w.sizes(), " and y ", y.sizes(),
              ": not fp32 [B, H, n, C, d] of a supported shape on a Hopper or newer GPU");
  const std::int64_t b = w.size(0), h = w.size(1), n = w.size(2), c = w.size(3), dk = y.size(4), dv = w.size(4);
  CheckKernelInputs("KdaStateScan", {{"w", &w, {b, h, n, c, dv}, kFp32},
                                     {"y", &y, {b, h, n, c, dk}, kFp32},
                                     {"k_to_end", &k_to_end, {b, h, n, c, dk}, kFp32},
                                     {"decay", &decay, {b, h, n, dk}, kFp32},
                                     {"s0", &s0, {b, h, dk, dv}, kFp32}});
  const variable_list out = KdaScanFunction::apply(w, y, k_to_end, decay, s0, math);
  return {out[0], out[1], out[2]};
}

bool KdaIntraKernelApplies(const torch::Tensor& q) {
  return OnCudaInFp32(q) && q.dim() >= 2 &&
         cuda::KdaIntraSupports(static_cast<int>(q.size(-2)), static_cast<int>(q.size(-1)));
}

std::pair<torch::Tensor, torch::Tensor> KdaIntraChunk(const torch::Tensor& q, const torch::Tensor& k,
                                                      const torch::Tensor& g_cum) {
  TORCH_CHECK(KdaIntraKernelApplies(q), "KdaIntraChunk: q ", q.sizes(),
              ": not fp32 [..., C, dk] of a supported shape on a Hopper or newer GPU");
  CheckKernelInputs("KdaIntraChunk",
                    {{"q", &q, q.sizes().vec(), kFp32}, {"k", &k, q.sizes().vec(), kFp32}, {"g_cum", &g_cum, q.sizes().vec(), kFp32}});
  const variable_list out = KdaIntraFunction::apply(q, k, g_cum);
  return {out[0], out[1]};
}

bool KdaRecurrentKernelApplies(const torch::Tensor& q, const torch::Tensor& v) {
  return !torch::GradMode::is_enabled() && OnCudaInFp32(q) && OnCudaInFp32(v) && q.dim() == 4 && v.dim() == 4 &&
         q.size(0) * q.size(2) <= kMaxGridY &&
         cuda::KdaRecurrentSupports(static_cast<int>(q.size(3)), static_cast<int>(v.size(3)));
}

torch::Tensor KdaRecurrentKernel(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& initial_state,
                                 torch::Tensor* final_state) {
  TORCH_CHECK(KdaRecurrentKernelApplies(q, v), "KdaRecurrentKernel: q ", q.sizes(), " and v ", v.sizes(),
              ": not fp32 [B, T, H, d] of a supported shape on a Hopper or newer GPU, without autograd");
  {
    const std::int64_t b = q.size(0), t = q.size(1), h = q.size(2), dk = q.size(3), dv = v.size(3);
    // A state of batch 1 is every row's (expanded below).
    const std::int64_t state_batch = initial_state.defined() && initial_state.dim() == 4 && initial_state.size(0) == 1 ? 1 : b;
    CheckKernelInputs("KdaRecurrentKernel", {{"q", &q, {b, t, h, dk}, kFp32},
                                             {"k", &k, {b, t, h, dk}, kFp32},
                                             {"v", &v, {b, t, h, dv}, kFp32},
                                             {"g", &g, {b, t, h, dk}, kFp32},
                                             {"beta", &beta, {b, t, h}, kFp32},
                                             {"initial_state", &initial_state, {state_batch, h, dk, dv}, kFloats, true}});
  }
  const c10::cuda::CUDAGuard guard(q.device());
  const torch::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous(), gc = g.contiguous(),
                      bc = beta.contiguous();
  const std::int64_t b = q.size(0), t = q.size(1), h = q.size(2), dk = q.size(3), dv = v.size(3);
  torch::Tensor s0;
  if (initial_state.defined()) s0 = initial_state.to(torch::kFloat).expand({b, h, dk, dv}).contiguous();
  torch::Tensor o = torch::empty({b, t, h, dv}, vc.options()), s1 = torch::empty({b, h, dk, dv}, vc.options());
  const cuda::KdaTokens shape{b, t, static_cast<int>(h), static_cast<int>(dk), static_cast<int>(dv)};
  Check(cuda::KdaRecurrentForward(shape, In(qc), In(kc), In(vc), In(gc), In(bc), s0.defined() ? In(s0) : nullptr,
                                  Out(o), Out(s1), c10::cuda::getCurrentCUDAStream()),
        "KDA recurrent steps");
  if (final_state) *final_state = s1;
  return o;
}

namespace {

// The chunked inputs of the chunk products and core: q, k and g_cum [B, H,
// n, C, dk], v [B, H, n, C, dv], beta [B, H, n, C, 1], fp32; q is 5-D.
std::vector<KernelInput> ChunkedInputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       const torch::Tensor& g_cum, const torch::Tensor& beta) {
  const std::vector<std::int64_t> qs = q.sizes().vec();
  return {{"q", &q, qs, kFp32},
          {"k", &k, qs, kFp32},
          {"v", &v, {qs[0], qs[1], qs[2], qs[3], kAnySize}, kFp32},
          {"g_cum", &g_cum, qs, kFp32},
          {"beta", &beta, {qs[0], qs[1], qs[2], qs[3], 1}, kFp32}};
}

}  // namespace

bool KdaChunkProductsKernelApplies(const torch::Tensor& q, const torch::Tensor& v) {
  return OnCudaInFp32(q) && OnCudaInFp32(v) && q.dim() == 5 && v.dim() == 5 &&
         cuda::KdaChunkProductsSupports(static_cast<int>(q.size(3)), static_cast<int>(q.size(4)),
                                        static_cast<int>(v.size(4)));
}

std::vector<torch::Tensor> KdaChunkProductsKernel(const torch::Tensor& q, const torch::Tensor& k,
                                                  const torch::Tensor& v, const torch::Tensor& g_cum,
                                                  const torch::Tensor& beta) {
  TORCH_CHECK(KdaChunkProductsKernelApplies(q, v), "KdaChunkProductsKernel: q ", q.sizes(), " and v ", v.sizes(),
              ": not fp32 [B, H, n, C, d] of a supported shape on a Hopper or newer GPU");
  CheckKernelInputs("KdaChunkProductsKernel", ChunkedInputs(q, k, v, g_cum, beta));
  return ChunkProductsFunction::apply(q, k, v, g_cum, beta);
}

bool KdaChunkCoreKernelApplies(const torch::Tensor& q, const torch::Tensor& v) {
  return KdaChunkProductsKernelApplies(q, v) && KdaScanKernelApplies(v, q);
}

std::pair<torch::Tensor, torch::Tensor> KdaChunkCoreKernel(const torch::Tensor& q, const torch::Tensor& k,
                                                           const torch::Tensor& v, const torch::Tensor& g_cum,
                                                           const torch::Tensor& beta, const torch::Tensor& inverse,
                                                           const torch::Tensor& qk, const torch::Tensor& s0,
                                                           KdaMath math) {
  TORCH_CHECK(KdaChunkCoreKernelApplies(q, v), "KdaChunkCoreKernel: q ", q.sizes(), " and v ", v.sizes(),
              ": not fp32 [B, H, n, C, d] of a supported shape on a Hopper or newer GPU");
  std::vector<KernelInput> inputs = ChunkedInputs(q, k, v, g_cum, beta);
  const std::vector<std::int64_t> square = SquareShape(q), state = {q.size(0), q.size(1), q.size(4), v.size(4)};
  inputs.push_back({"inverse", &inverse, square, kFp32});
  inputs.push_back({"qk", &qk, square, kFp32});
  inputs.push_back({"s0", &s0, state, kFp32});
  CheckKernelInputs("KdaChunkCoreKernel", inputs);
  const variable_list out = KdaChunkCoreFunction::apply(q, k, v, g_cum, beta, inverse, qk, s0, math);
  return {out[0], out[1]};
}

#else  // no CUDA kernels in this build

bool KdaIntraKernelApplies(const torch::Tensor&) { return false; }
std::pair<torch::Tensor, torch::Tensor> KdaIntraChunk(const torch::Tensor&, const torch::Tensor&,
                                                      const torch::Tensor&) {
  kernel_support::NoCudaKernels("KdaIntraChunk");
}
bool KdaScanKernelApplies(const torch::Tensor&, const torch::Tensor&) { return false; }
KdaScanResult KdaStateScan(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                           const torch::Tensor&, KdaMath) {
  kernel_support::NoCudaKernels("KdaStateScan");
}
bool KdaRecurrentKernelApplies(const torch::Tensor&, const torch::Tensor&) { return false; }
torch::Tensor KdaRecurrentKernel(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                 const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, torch::Tensor*) {
  kernel_support::NoCudaKernels("KdaRecurrentKernel");
}
bool KdaChunkProductsKernelApplies(const torch::Tensor&, const torch::Tensor&) { return false; }
std::vector<torch::Tensor> KdaChunkProductsKernel(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                                  const torch::Tensor&, const torch::Tensor&) {
  kernel_support::NoCudaKernels("KdaChunkProductsKernel");
}
bool KdaChunkCoreKernelApplies(const torch::Tensor&, const torch::Tensor&) { return false; }
std::pair<torch::Tensor, torch::Tensor> KdaChunkCoreKernel(const torch::Tensor&, const torch::Tensor&,
                                                           const torch::Tensor&, const torch::Tensor&,
                                                           const torch::Tensor&, const torch::Tensor&,
                                                           const torch::Tensor&, const torch::Tensor&, KdaMath) {
  kernel_support::NoCudaKernels("KdaChunkCoreKernel");
}

#endif

}  // namespace kp::runtime
