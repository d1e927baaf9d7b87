#include "runtime/model/cuda_kernels.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#ifdef KIMI_PLAN_KDA_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "runtime/comm/device.h"
#include "runtime/model/attn_res_cuda.h"
#include "runtime/model/cast_cuda.h"
#include "runtime/model/cross_entropy_cuda.h"
#include "runtime/model/kda_cuda.h"
#include "runtime/model/kda_prep_cuda.h"
#include "runtime/model/moe_combine_cuda.h"
#include "runtime/model/rms_norm_cuda.h"
#include "runtime/model/swiglu_cuda.h"
#endif

namespace kp::runtime {

#ifdef KIMI_PLAN_KDA_CUDA
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void Check(cudaError_t err, const char* what) { TORCH_CHECK(err == cudaSuccess, what, ": ", cudaGetErrorString(err)); }

// The kernels are built for sm_90 (with its PTX, which newer GPUs compile):
// Hopper or newer only.
bool OnKernelGpu(const torch::Tensor& t) { return t.is_cuda() && ComputeCapabilityMajor(t.device()) >= 9; }

bool OnCudaInFp32(const torch::Tensor& t) { return OnKernelGpu(t) && t.scalar_type() == torch::kFloat; }

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

const float* In(const torch::Tensor& t) { return t.data_ptr<float>(); }
float* Out(torch::Tensor& t) { return t.data_ptr<float>(); }

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

cuda::KdaScan ScanOf(const torch::Tensor& w, const torch::Tensor& y) {
  return {w.size(0) * w.size(1), static_cast<int>(w.size(2)), static_cast<int>(w.size(3)),
          static_cast<int>(y.size(4)), static_cast<int>(w.size(4))};
}

const float* InOrNull(const torch::Tensor& t) { return t.defined() ? In(t) : nullptr; }

// The chunk scan (KdaStateScan) on contiguous fp32 tensors: {u, starts, last}.
variable_list ScanForward(const torch::Tensor& w, const torch::Tensor& y, const torch::Tensor& k_to_end,
                          const torch::Tensor& decay, const torch::Tensor& s0) {
  const std::int64_t b = w.size(0), h = w.size(1), n = w.size(2), dk = y.size(4), dv = w.size(4);
  torch::Tensor u = torch::empty_like(w), starts = torch::empty({b, h, n, dk, dv}, w.options()),
                last = torch::empty({b, h, dk, dv}, w.options());
  Check(cuda::KdaChunkScan(ScanOf(w, y), /*reverse=*/false, /*sign_bs=*/-1.f, /*sign_cx=*/1.f, In(w), In(y),
                           In(k_to_end), In(decay), nullptr, In(s0), Out(u), Out(starts), Out(last),
                           c10::cuda::getCurrentCUDAStream()),
        "KDA chunk scan");
  return {u, starts, last};
}

// The scan's gradients {dw, dy, dk_to_end, ddecay, ds0} from its saved
// tensors and the gradients of {u, starts, last} (any may be undefined).
variable_list ScanBackward(const torch::Tensor& y, const torch::Tensor& k, const torch::Tensor& decay,
                           const torch::Tensor& u, const torch::Tensor& starts, const torch::Tensor& du_in,
                           const torch::Tensor& dstarts_in, const torch::Tensor& dlast_in) {
  const torch::Tensor du = du_in.defined() ? du_in.contiguous() : torch::zeros_like(u);
  const torch::Tensor dstarts = dstarts_in.defined() ? dstarts_in.contiguous() : torch::Tensor();
  const torch::Tensor dlast = dlast_in.defined() ? dlast_in.contiguous() : torch::Tensor();
  torch::Tensor du_total = torch::empty_like(u), dends = torch::empty_like(starts),
                ds0 = torch::empty({u.size(0), u.size(1), y.size(4), u.size(4)}, u.options());
  // The same recurrence on the gradients, last chunk first: x = dU + K dS
  // is U's whole gradient, `starts` the gradient of each chunk's end state.
  Check(cuda::KdaChunkScan(ScanOf(u, y), /*reverse=*/true, /*sign_bs=*/1.f, /*sign_cx=*/-1.f, In(du), In(k), In(y),
                           In(decay), InOrNull(dstarts), InOrNull(dlast), Out(du_total), Out(dends), Out(ds0),
                           c10::cuda::getCurrentCUDAStream()),
        "KDA chunk scan backward");
  const torch::Tensor dy = -torch::matmul(du_total, starts.transpose(-1, -2));
  const torch::Tensor dk = torch::matmul(u, dends.transpose(-1, -2));
  const torch::Tensor ddecay = (starts * dends).sum(-1);
  return {du_total, dy, dk, ddecay, ds0};
}

class KdaScanFunction : public torch::autograd::Function<KdaScanFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& w, const torch::Tensor& y,
                               const torch::Tensor& k_to_end, const torch::Tensor& decay, const torch::Tensor& s0) {
    const c10::cuda::CUDAGuard guard(w.device());
    const torch::Tensor yc = y.contiguous(), kc = k_to_end.contiguous(), dc = decay.contiguous();
    variable_list out = ScanForward(w.contiguous(), yc, kc, dc, s0.contiguous());
    ctx->save_for_backward({yc, kc, dc, out[0], out[1]});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const c10::cuda::CUDAGuard guard(saved[3].device());
    return ScanBackward(saved[0], saved[1], saved[2], saved[3], saved[4], grads[0], grads[1], grads[2]);
  }
};

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

bool FloatOrBf16OnCuda(const torch::Tensor& t) {
  return OnKernelGpu(t) && (t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kBFloat16);
}

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
                               const torch::Tensor& inverse, const torch::Tensor& qk, const torch::Tensor& s0) {
    const c10::cuda::CUDAGuard guard(q.device());
    const variable_list in = {q.contiguous(), k.contiguous(), v.contiguous(), g_cum.contiguous(), beta.contiguous()};
    const variable_list p = ProductsForward(in);  // q e^G, beta k e^G, k e^{G_C - G}, beta v, e^{G_C}
    const torch::Tensor w = torch::matmul(inverse, p[3]), y = torch::matmul(inverse, p[1]);
    const variable_list scan = ScanForward(w, y, p[2], p[4], s0.contiguous());  // u, starts, last
    const torch::Tensor out = torch::matmul(p[0], scan[1]) + torch::matmul(qk, scan[0]);
    variable_list keep = in;
    keep.insert(keep.end(), {inverse, qk, scan[0], scan[1]});
    ctx->save_for_backward(keep);
    return {out, scan[2]};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const variable_list in(saved.begin(), saved.begin() + 5);
    const torch::Tensor &inverse = saved[5], &qk = saved[6], &u = saved[7], &starts = saved[8];
    const c10::cuda::CUDAGuard guard(u.device());
    const variable_list p = ProductsForward(in);
    const torch::Tensor y = torch::matmul(inverse, p[1]);
    const torch::Tensor dout = grads[0].defined() ? grads[0].contiguous()
                                                  : torch::zeros({u.size(0), u.size(1), u.size(2), u.size(3),
                                                                  u.size(4)}, u.options());
    auto t = [](const torch::Tensor& x) { return x.transpose(-1, -2); };
    // out = Qd starts + qk u
    const torch::Tensor dq_decayed = torch::matmul(dout, t(starts)), dstarts = torch::matmul(t(p[0]), dout);
    const torch::Tensor dqk = torch::matmul(dout, t(u)), du = torch::matmul(t(qk), dout);
    const variable_list ds = ScanBackward(y, p[2], p[4], u, starts, du, dstarts, grads[1]);  // dw, dy, dke, ddecay, ds0
    // w = inverse (beta v), y = inverse (beta k e^G)
    const torch::Tensor dinverse = torch::matmul(ds[0], t(p[3])) + torch::matmul(ds[1], t(p[1]));
    const torch::Tensor dv_beta = torch::matmul(t(inverse), ds[0]), dk_beta = torch::matmul(t(inverse), ds[1]);
    variable_list d = ProductsBackward(in, {dq_decayed, dk_beta, ds[2], dv_beta, ds[3]});
    d.insert(d.end(), {dinverse, dqk, ds[4]});
    return d;
  }
};

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

bool CudaKernelsBuilt() { return true; }

bool RmsNormKernelApplies(const torch::Tensor& x) {
  return FloatOrBf16OnCuda(x) && x.dim() >= 1 && cuda::RmsNormSupports(static_cast<int>(x.size(-1)));
}

torch::Tensor RmsNormKernel(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  TORCH_CHECK(RmsNormKernelApplies(x), "RmsNormKernel: unsupported input");
  const std::int64_t dim = x.size(-1);
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
  TORCH_CHECK(GatedRmsNormKernelApplies(x, gate) && weight.numel() == x.size(3),
              "GatedRmsNormKernel: x [B, T, H, D] fp32, gate [B, T, H D] and weight [D] on a supported GPU");
  return GatedRmsNormFunction::apply(x, gate, weight.to(torch::kFloat).reshape({x.size(3)}), eps)[0];
}

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
  TORCH_CHECK(AttnResKernelApplies(values), "AttnResReadKernel: unsupported values");
  const torch::Tensor w = (norm_weight * query).to(torch::kFloat);
  return DepthReadFunction::apply(at::TensorList(values), w, eps)[0];
}

bool KdaScanKernelApplies(const torch::Tensor& w, const torch::Tensor& y) {
  return OnCudaInFp32(w) && w.dim() == 5 && y.dim() == 5 && w.size(0) * w.size(1) <= kMaxGridY &&
         cuda::KdaScanSupports(static_cast<int>(w.size(3)), static_cast<int>(y.size(4)), static_cast<int>(w.size(4)));
}

KdaScanResult KdaStateScan(const torch::Tensor& w, const torch::Tensor& y, const torch::Tensor& k_to_end,
                           const torch::Tensor& decay, const torch::Tensor& s0) {
  const std::int64_t b = w.size(0), h = w.size(1), n = w.size(2), dk = y.size(4), dv = w.size(4);
  const std::vector<std::int64_t> decay_shape = {b, h, n, dk}, state_shape = {b, h, dk, dv};
  const bool shapes_fit = k_to_end.sizes() == y.sizes() && decay.sizes() == at::IntArrayRef(decay_shape) &&
                          s0.sizes() == at::IntArrayRef(state_shape);
  TORCH_CHECK(KdaScanKernelApplies(w, y) && OnCudaInFp32(y) && OnCudaInFp32(k_to_end) && OnCudaInFp32(decay) &&
                  OnCudaInFp32(s0) && shapes_fit,
              "KdaStateScan: fp32 CUDA tensors of a supported shape");
  const variable_list out = KdaScanFunction::apply(w, y, k_to_end, decay, s0);
  return {out[0], out[1], out[2]};
}

bool KdaIntraKernelApplies(const torch::Tensor& q) {
  return OnCudaInFp32(q) && q.dim() >= 2 &&
         cuda::KdaIntraSupports(static_cast<int>(q.size(-2)), static_cast<int>(q.size(-1)));
}

std::pair<torch::Tensor, torch::Tensor> KdaIntraChunk(const torch::Tensor& q, const torch::Tensor& k,
                                                      const torch::Tensor& g_cum) {
  TORCH_CHECK(KdaIntraKernelApplies(q) && OnCudaInFp32(k) && OnCudaInFp32(g_cum) && k.sizes() == q.sizes() &&
                  g_cum.sizes() == q.sizes(),
              "KdaIntraChunk: q, k and g_cum must be equal-shaped fp32 CUDA tensors of a supported shape");
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
  TORCH_CHECK(KdaRecurrentKernelApplies(q, v), "KdaRecurrentKernel: unsupported tensors");
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

bool KdaPrepKernelsApply(const torch::Tensor& x, std::int64_t dim, std::int64_t conv_width) {
  return FloatOrBf16OnCuda(x) && x.dim() == 3 && dim > 0 && x.size(2) % dim == 0 &&
         cuda::KdaPrepSupports(static_cast<int>(dim), static_cast<int>(conv_width), 1);
}

torch::Tensor KdaShortConvChunked(const torch::Tensor& x, const torch::Tensor& weight, std::int64_t heads,
                                  std::int64_t chunk, bool l2, double scale, double eps) {
  TORCH_CHECK(heads > 0 && x.dim() == 3 && x.size(2) % heads == 0 && weight.dim() == 2 &&
                  weight.size(0) == x.size(2) && chunk > 0 && KdaPrepKernelsApply(x, x.size(2) / heads, weight.size(1)),
              "KdaShortConvChunked: unsupported input");
  return ShortConvFunction::apply(x, weight.to(torch::kFloat), heads, chunk, l2, scale, eps)[0];
}

torch::Tensor KdaGateCumChunked(const torch::Tensor& f, const torch::Tensor& a_log, const torch::Tensor& dt_bias,
                                std::int64_t heads, std::int64_t chunk) {
  TORCH_CHECK(heads > 0 && f.dim() == 3 && f.size(2) % heads == 0 && a_log.numel() == heads &&
                  dt_bias.numel() == f.size(2) && chunk > 0 && KdaPrepKernelsApply(f, f.size(2) / heads, 1),
              "KdaGateCumChunked: unsupported input");
  return GateCumFunction::apply(f, a_log.to(torch::kFloat).reshape({heads}),
                                dt_bias.to(torch::kFloat).reshape({f.size(2)}), heads, chunk)[0];
}

bool SwiGluKernelApplies(const torch::Tensor& gate, const torch::Tensor& up) {
  return FloatOrBf16OnCuda(gate) && up.scalar_type() == gate.scalar_type() && up.sizes() == gate.sizes() &&
         up.device() == gate.device();
}

torch::Tensor SwiGluKernel(const torch::Tensor& gate, const torch::Tensor& up) {
  TORCH_CHECK(SwiGluKernelApplies(gate, up), "SwiGluKernel: unsupported tensors");
  return SwiGluFunction::apply(gate, up)[0];
}

bool CrossEntropyKernelApplies(const torch::Tensor& logits) {
  return FloatOrBf16OnCuda(logits) && logits.dim() == 2 && logits.size(1) > 0;
}

torch::Tensor CrossEntropyKernel(const torch::Tensor& logits, const torch::Tensor& targets) {
  TORCH_CHECK(CrossEntropyKernelApplies(logits) && targets.dim() == 1 && targets.size(0) == logits.size(0) &&
                  targets.scalar_type() == torch::kLong && targets.device() == logits.device(),
              "CrossEntropyKernel: logits [N, V] on a supported GPU and int64 targets [N] on it");
  return CrossEntropyFunction::apply(logits, targets)[0];
}

bool LinearCrossEntropyKernelApplies(const torch::Tensor& x, const torch::Tensor& weight) {
  return FloatOrBf16OnCuda(x) && x.dim() == 2 && weight.dim() == 2 && weight.size(1) == x.size(1) &&
         weight.size(0) > 0 && (weight.scalar_type() == torch::kFloat || weight.scalar_type() == torch::kBFloat16) &&
         weight.device() == x.device();
}

torch::Tensor LinearCrossEntropyKernel(const torch::Tensor& x, const torch::Tensor& weight,
                                       const torch::Tensor& targets, std::int64_t rows_per_chunk) {
  TORCH_CHECK(LinearCrossEntropyKernelApplies(x, weight) && targets.dim() == 1 && targets.size(0) == x.size(0) &&
                  targets.scalar_type() == torch::kLong && targets.device() == x.device(),
              "LinearCrossEntropyKernel: rows [N, D] and an fp32 weight [V, D] on a supported GPU, int64 targets [N]");
  return LinearCrossEntropyFunction::apply(x, weight, targets, rows_per_chunk)[0];
}

bool KdaChunkProductsKernelApplies(const torch::Tensor& q, const torch::Tensor& v) {
  return OnCudaInFp32(q) && OnCudaInFp32(v) && q.dim() == 5 && v.dim() == 5 &&
         cuda::KdaChunkProductsSupports(static_cast<int>(q.size(3)), static_cast<int>(q.size(4)),
                                        static_cast<int>(v.size(4)));
}

std::vector<torch::Tensor> KdaChunkProductsKernel(const torch::Tensor& q, const torch::Tensor& k,
                                                  const torch::Tensor& v, const torch::Tensor& g_cum,
                                                  const torch::Tensor& beta) {
  const bool shapes_fit = k.sizes() == q.sizes() && g_cum.sizes() == q.sizes() &&
                          v.sizes().slice(0, 4) == q.sizes().slice(0, 4) && beta.dim() == 5 &&
                          beta.sizes().slice(0, 4) == q.sizes().slice(0, 4) && beta.size(4) == 1;
  TORCH_CHECK(KdaChunkProductsKernelApplies(q, v) && OnCudaInFp32(k) && OnCudaInFp32(g_cum) && OnCudaInFp32(beta) &&
                  shapes_fit,
              "KdaChunkProductsKernel: fp32 CUDA tensors of a supported shape");
  return ChunkProductsFunction::apply(q, k, v, g_cum, beta);
}

bool KdaChunkCoreKernelApplies(const torch::Tensor& q, const torch::Tensor& v) {
  return KdaChunkProductsKernelApplies(q, v) && KdaScanKernelApplies(v, q);
}

std::pair<torch::Tensor, torch::Tensor> KdaChunkCoreKernel(const torch::Tensor& q, const torch::Tensor& k,
                                                           const torch::Tensor& v, const torch::Tensor& g_cum,
                                                           const torch::Tensor& beta, const torch::Tensor& inverse,
                                                           const torch::Tensor& qk, const torch::Tensor& s0) {
  const std::int64_t b = q.size(0), h = q.size(1), dk = q.size(4), dv = v.size(4);
  const std::vector<std::int64_t> state = {b, h, dk, dv};
  const bool shapes_fit = q.dim() == 5 && k.sizes() == q.sizes() && g_cum.sizes() == q.sizes() &&
                          v.sizes().slice(0, 4) == q.sizes().slice(0, 4) && beta.dim() == 5 &&
                          beta.sizes().slice(0, 4) == q.sizes().slice(0, 4) && beta.size(4) == 1 &&
                          inverse.sizes() == at::IntArrayRef(SquareShape(q)) && qk.sizes() == inverse.sizes() &&
                          s0.sizes() == at::IntArrayRef(state);
  TORCH_CHECK(KdaChunkCoreKernelApplies(q, v) && OnCudaInFp32(k) && OnCudaInFp32(g_cum) && OnCudaInFp32(beta) &&
                  OnCudaInFp32(inverse) && OnCudaInFp32(qk) && OnCudaInFp32(s0) && shapes_fit,
              "KdaChunkCoreKernel: fp32 CUDA tensors of a supported shape");
  const variable_list out = KdaChunkCoreFunction::apply(q, k, v, g_cum, beta, inverse, qk, s0);
  return {out[0], out[1]};
}

bool CastKernelApplies(const torch::Tensor& x, c10::ScalarType dtype) {
  return dtype == torch::kBFloat16 && OnCudaInFp32(x);
}

torch::Tensor CastKernel(const torch::Tensor& x, c10::ScalarType dtype) {
  TORCH_CHECK(CastKernelApplies(x, dtype), "CastKernel: fp32 on a supported GPU to bf16 only");
  return CastFunction::apply(x)[0];
}

bool MoeCombineKernelApplies(const torch::Tensor& rows, std::int64_t k) {
  return FloatOrBf16OnCuda(rows) && rows.dim() == 2 && rows.size(0) % k == 0 &&
         cuda::MoeCombineSupports(static_cast<int>(k), static_cast<int>(rows.size(1)));
}

torch::Tensor MoeCombineKernel(const torch::Tensor& rows, const torch::Tensor& row_of, const torch::Tensor& weights) {
  TORCH_CHECK(weights.dim() == 2 && MoeCombineKernelApplies(rows, weights.size(1)) &&
                  rows.size(0) == weights.numel() && row_of.numel() == rows.size(0) &&
                  row_of.scalar_type() == torch::kLong && weights.scalar_type() == torch::kFloat &&
                  row_of.device() == rows.device() && weights.device() == rows.device(),
              "MoeCombineKernel: rows [N k, D], int64 row_of [N k] and fp32 weights [N, k] on one supported GPU");
  return MoeCombineFunction::apply(rows, row_of, weights)[0];
}

#else  // no CUDA kernels in this build

bool CudaKernelsBuilt() { return false; }
bool KdaIntraKernelApplies(const torch::Tensor&) { return false; }
std::pair<torch::Tensor, torch::Tensor> KdaIntraChunk(const torch::Tensor&, const torch::Tensor&,
                                                      const torch::Tensor&) {
  throw std::logic_error("KdaIntraChunk: this build has no CUDA KDA kernels");
}
bool KdaScanKernelApplies(const torch::Tensor&, const torch::Tensor&) { return false; }
KdaScanResult KdaStateScan(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                           const torch::Tensor&) {
  throw std::logic_error("KdaStateScan: this build has no CUDA KDA kernels");
}
bool KdaRecurrentKernelApplies(const torch::Tensor&, const torch::Tensor&) { return false; }
bool AttnResKernelApplies(const std::vector<torch::Tensor>&) { return false; }
bool RmsNormKernelApplies(const torch::Tensor&) { return false; }
bool GatedRmsNormKernelApplies(const torch::Tensor&, const torch::Tensor&) { return false; }
torch::Tensor GatedRmsNormKernel(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, double) {
  throw std::logic_error("GatedRmsNormKernel: this build has no CUDA kernels");
}
torch::Tensor RmsNormKernel(const torch::Tensor&, const torch::Tensor&, double) {
  throw std::logic_error("RmsNormKernel: this build has no CUDA kernels");
}
torch::Tensor AttnResReadKernel(const std::vector<torch::Tensor>&, const torch::Tensor&, const torch::Tensor&, double) {
  throw std::logic_error("AttnResReadKernel: this build has no CUDA kernels");
}
torch::Tensor KdaRecurrentKernel(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                 const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, torch::Tensor*) {
  throw std::logic_error("KdaRecurrentKernel: this build has no CUDA KDA kernels");
}

bool KdaPrepKernelsApply(const torch::Tensor&, std::int64_t, std::int64_t) { return false; }
torch::Tensor KdaShortConvChunked(const torch::Tensor&, const torch::Tensor&, std::int64_t, std::int64_t, bool, double,
                                  double) {
  throw std::logic_error("KdaShortConvChunked: this build has no CUDA KDA kernels");
}
torch::Tensor KdaGateCumChunked(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, std::int64_t,
                                std::int64_t) {
  throw std::logic_error("KdaGateCumChunked: this build has no CUDA KDA kernels");
}
bool KdaChunkProductsKernelApplies(const torch::Tensor&, const torch::Tensor&) { return false; }
std::vector<torch::Tensor> KdaChunkProductsKernel(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                                  const torch::Tensor&, const torch::Tensor&) {
  throw std::logic_error("KdaChunkProductsKernel: this build has no CUDA KDA kernels");
}
bool KdaChunkCoreKernelApplies(const torch::Tensor&, const torch::Tensor&) { return false; }
std::pair<torch::Tensor, torch::Tensor> KdaChunkCoreKernel(const torch::Tensor&, const torch::Tensor&,
                                                           const torch::Tensor&, const torch::Tensor&,
                                                           const torch::Tensor&, const torch::Tensor&,
                                                           const torch::Tensor&, const torch::Tensor&) {
  throw std::logic_error("KdaChunkCoreKernel: this build has no CUDA KDA kernels");
}
bool MoeCombineKernelApplies(const torch::Tensor&, std::int64_t) { return false; }
torch::Tensor MoeCombineKernel(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) {
  throw std::logic_error("MoeCombineKernel: this build has no CUDA kernels");
}
bool CastKernelApplies(const torch::Tensor&, c10::ScalarType) { return false; }
torch::Tensor CastKernel(const torch::Tensor&, c10::ScalarType) {
  throw std::logic_error("CastKernel: this build has no CUDA kernels");
}
bool LinearCrossEntropyKernelApplies(const torch::Tensor&, const torch::Tensor&) { return false; }
torch::Tensor LinearCrossEntropyKernel(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, std::int64_t) {
  throw std::logic_error("LinearCrossEntropyKernel: this build has no CUDA kernels");
}
bool CrossEntropyKernelApplies(const torch::Tensor&) { return false; }
torch::Tensor CrossEntropyKernel(const torch::Tensor&, const torch::Tensor&) {
  throw std::logic_error("CrossEntropyKernel: this build has no CUDA kernels");
}
bool SwiGluKernelApplies(const torch::Tensor&, const torch::Tensor&) { return false; }
torch::Tensor SwiGluKernel(const torch::Tensor&, const torch::Tensor&) {
  throw std::logic_error("SwiGluKernel: this build has no CUDA kernels");
}

#endif

}  // namespace kp::runtime
