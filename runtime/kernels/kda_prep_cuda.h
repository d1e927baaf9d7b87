// The CUDA kernels that make KDA's chunked inputs from its projections
// (docs/runtime.md §5), forward and backward: the short convolution with
// its SiLU and, for q and k, the per-head L2 normalisation; and the
// per-channel forget gate with its in-chunk cumulative sum. Each replaces a
// chain of ~10 fp32 torch passes (upcast, convolution, activation, norm,
// the [B, T, H, d] -> [B, H, n, C, d] copy) and the intermediates autograd
// kept of them: the backward recomputes from the bf16 projection.
//
// Plain pointers and a stream; kda_prep.cc and kda.cc wrap them. fp32 arithmetic,
// deterministic (no atomics; the weight gradients come back as per-tile
// partial sums that the caller reduces in a fixed order).
#ifndef KIMI_PLAN_RUNTIME_KERNELS_KDA_PREP_CUDA_H_
#define KIMI_PLAN_RUNTIME_KERNELS_KDA_PREP_CUDA_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace kp::runtime::cuda {

/// Projection rows [batch, tokens, heads * dim] contiguous (bf16 or fp32),
/// and their chunked form [batch, heads, n, chunk, dim] fp32 with
/// n = ceil(tokens / chunk), the tail padded by zero rows.
struct KdaPrepShape {
  std::int64_t batch = 0;
  std::int64_t tokens = 0;
  int heads = 0;
  int dim = 0;
  int chunk = 0;
  int kernel = 0;  ///< the short convolution's width (the conv kernels only)
  bool bf16 = false;
};

/// True for dim a multiple of 32 up to 256, kernel 1 to 8 and chunk >= 1.
bool KdaPrepSupports(int dim, int kernel, int chunk);

/// out = scale * N(silu(conv(x))), conv the causal depthwise convolution
/// (w [heads * dim, kernel] fp32, tap kernel - 1 on the current token, zeros
/// before the first), N the L2 normalisation over each head's dim channels
/// (v / sqrt(|v|^2 + eps)) when `l2`, else the identity.
cudaError_t ShortConvForward(const KdaPrepShape& shape, const void* x, const float* w, bool l2, float scale,
                             float eps, float* out, cudaStream_t stream);

/// The number of token tiles whose partial weight gradients
/// ShortConvBackward writes.
std::int64_t ShortConvTiles(const KdaPrepShape& shape);

/// Given dout (chunked, fp32): dx (x's dtype, x's layout) and dw_partial
/// [ShortConvTiles, heads * dim, kernel], whose sum over the first axis is
/// dL/dw. `scratch` is fp32 [batch, tokens, heads * dim].
cudaError_t ShortConvBackward(const KdaPrepShape& shape, const void* x, const float* w, bool l2, float scale,
                              float eps, const float* dout, float* scratch, void* dx, float* dw_partial,
                              cudaStream_t stream);

/// cum = the inclusive sum within each chunk of
///   g = -exp(a_log[head]) * softplus(f + dt_bias)   (softplus(z) = z for z > 20, as torch's)
/// with g = 0 on padding rows; f [batch, tokens, heads * dim], a_log [heads]
/// and dt_bias [heads * dim] fp32, cum chunked.
cudaError_t GateCumForward(const KdaPrepShape& shape, const void* f, const float* a_log, const float* dt_bias,
                           float* cum, cudaStream_t stream);

/// Given dcum (chunked): df (f's dtype and layout), and [batch * n, heads *
/// dim] partials whose sums over the first axis are dL/d dt_bias and, summed
/// also over each head's channels, dL/d a_log.
cudaError_t GateCumBackward(const KdaPrepShape& shape, const void* f, const float* a_log, const float* dt_bias,
                            const float* dcum, void* df, float* ddt_partial, float* dalog_partial,
                            cudaStream_t stream);

/// KdaChunkedCore's products of its chunked inputs (docs/runtime.md §5):
/// `chunks` chunks of `chunk` rows, q, k and the in-chunk cumulative log
/// decay G [chunks, C, dk], v [chunks, C, dv], beta [chunks, C], all fp32.
struct KdaChunkProducts {
  std::int64_t chunks = 0;
  int chunk = 0;
  int dk = 0;
  int dv = 0;
};

/// True for dk and dv multiples of 32 up to 256 and chunk * max(dk, dv) <= 8192.
bool KdaChunkProductsSupports(int chunk, int dk, int dv);

/// qd = q e^G,  kb = beta k e^G,  ke = k e^{G_C - G}  [chunks, C, dk];
/// vb = beta v [chunks, C, dv];  decay = e^{G_C} [chunks, dk], with G_C
/// each chunk's last row.
cudaError_t KdaChunkProductsForward(const KdaChunkProducts& shape, const float* q, const float* k, const float* v,
                                    const float* g_cum, const float* beta, float* qd, float* kb, float* ke,
                                    float* vb, float* decay, cudaStream_t stream);

/// The gradients of the forward's inputs from those of its outputs.
cudaError_t KdaChunkProductsBackward(const KdaChunkProducts& shape, const float* q, const float* k, const float* v,
                                     const float* g_cum, const float* beta, const float* dqd, const float* dkb,
                                     const float* dke, const float* dvb, const float* ddecay, float* dq, float* dk,
                                     float* dv, float* dg_cum, float* dbeta, cudaStream_t stream);

}  // namespace kp::runtime::cuda

#endif  // KIMI_PLAN_RUNTIME_KERNELS_KDA_PREP_CUDA_H_
