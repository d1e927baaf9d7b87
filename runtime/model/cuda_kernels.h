// LibTorch faces of the CUDA kernels: KDA's (kda_cuda.h: the intra-chunk
// products and the chunk scan as differentiable functions, the recurrent
// steps for decoding) and the attention-residual depth read's
// (attn_res_cuda.h). In a build without them (no CUDA Toolkit or a CPU
// LibTorch) the *Applies functions return false and callers keep the torch
// forms of attention.h and layers.h.
#ifndef KIMI_PLAN_RUNTIME_MODEL_CUDA_KERNELS_H_
#define KIMI_PLAN_RUNTIME_MODEL_CUDA_KERNELS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace kp::runtime {

/// True when this build has the CUDA kernels of this header.
bool CudaKernelsBuilt();

/// True when KdaIntraChunk takes chunked tensors like `q` ([B, H, n, C, dk]):
/// built, fp32, on a Hopper or newer GPU, C in {16, 32, 64}, dk a multiple of 32.
bool KdaIntraKernelApplies(const torch::Tensor& q);

/// The strict-lower A and lower-inclusive P of KdaChunked (attention.cc),
/// from q, k and the in-chunk cumulative log decay `g_cum`, all
/// [B, H, n, C, dk] fp32 on one Hopper or newer GPU; returns [B, H, n, C, C] each.
/// Differentiable with respect to all three (no double backward).
std::pair<torch::Tensor, torch::Tensor> KdaIntraChunk(const torch::Tensor& q, const torch::Tensor& k,
                                                      const torch::Tensor& g_cum);

/// True when KdaStateScan takes w [B, H, n, C, dv] and y [B, H, n, C, dk]:
/// built, fp32 on a Hopper or newer GPU, C in {16, 32, 64}, dk 64 or 128, dv
/// a multiple of 32, B * H <= 65535.
bool KdaScanKernelApplies(const torch::Tensor& w, const torch::Tensor& y);

struct KdaScanResult {
  torch::Tensor u;            ///< [B, H, n, C, dv]
  torch::Tensor starts;       ///< [B, H, n, dk, dv]: the state at each chunk's start
  torch::Tensor final_state;  ///< [B, H, dk, dv]
};

/// KdaChunked's sequential part in one kernel: from S = s0, per chunk i
///   U_i = W_i - Y_i S;   starts_i = S;   S <- Diag(decay_i) S + K_i^T U_i
/// with k_to_end [B, H, n, C, dk] and decay [B, H, n, dk]. Differentiable
/// with respect to all five inputs; the backward is the same scan run in
/// reverse on the gradients, plus three batched products.
KdaScanResult KdaStateScan(const torch::Tensor& w, const torch::Tensor& y, const torch::Tensor& k_to_end,
                           const torch::Tensor& decay, const torch::Tensor& s0);

/// True when KdaRecurrentKernel takes q [B, T, H, dk] and v [B, T, H, dv]:
/// built, fp32, on a Hopper or newer GPU, dk 64 or 128, dv a multiple of 32, and no
/// gradient wanted (the kernel has no backward: it serves decoding).
bool KdaRecurrentKernelApplies(const torch::Tensor& q, const torch::Tensor& v);

/// KdaRecurrent's result (attention.h) by the kernel; `initial_state` may
/// be undefined (zeros). `final_state`, when given, gets a new tensor.
torch::Tensor KdaRecurrentKernel(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& initial_state,
                                 torch::Tensor* final_state);

/// True when RmsNormKernel takes x [..., D]: built, fp32 or bf16 on a Hopper
/// or newer GPU, D a multiple of 32.
bool RmsNormKernelApplies(const torch::Tensor& x);

/// RMSNorm (layers.h: RmsNormalize(x) * weight) in x's dtype by the kernel,
/// fp32 inside; differentiable in x and the fp32 weight [D].
torch::Tensor RmsNormKernel(const torch::Tensor& x, const torch::Tensor& weight, double eps);

/// True when GatedRmsNormKernel takes x and gate: built, x fp32 [B, T, H, D]
/// and gate [B, T, H D] fp32 or bf16 on one Hopper or newer GPU, D a
/// multiple of 32.
bool GatedRmsNormKernelApplies(const torch::Tensor& x, const torch::Tensor& gate);

/// KDA's gated output norm (attention.h): RmsNormalize(x) * weight *
/// sigmoid(gate) per head, as [B, T, H D] in the gate's dtype, fp32 inside.
/// x is read at its strides (KdaChunkedCore's output needs no copy).
/// Differentiable in x, the gate and the fp32 weight [D]; keeps x and the
/// gate, not the fp32 norm or the sigmoid.
torch::Tensor GatedRmsNormKernel(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& weight,
                                 double eps);

/// True when AttnResReadKernel takes these depth values (the stack entries
/// then the partial sum): built, on one Hopper or newer GPU, all fp32 or all bf16 of
/// one shape [..., D], at most 16 of them, D a multiple of 32.
bool AttnResKernelApplies(const std::vector<torch::Tensor>& values);

/// AttnResRead's result (layers.h) by the kernel, in the values' dtype;
/// differentiable in the values, the norm weight and the query.
torch::Tensor AttnResReadKernel(const std::vector<torch::Tensor>& values, const torch::Tensor& norm_weight,
                                const torch::Tensor& query, double eps);

/// True when the KDA preparation kernels take the projection rows x
/// [B, T, heads * dim]: built, fp32 or bf16 on a Hopper or newer GPU, dim a
/// multiple of 32 up to 256, a convolution of width 1 to 8.
bool KdaPrepKernelsApply(const torch::Tensor& x, std::int64_t dim, std::int64_t conv_width);

/// KdaImpl's q, k or v chunked for KdaChunkedCore (attention.h), from its
/// projection x [B, T, heads * dim] and depthwise convolution weight [heads *
/// dim, width]: scale * L2(silu(CausalDepthwiseConv(x, weight))), the L2
/// normalisation per head only when `l2`, as [B, heads, n, chunk, dim] fp32
/// zero-padded to n * chunk tokens. Differentiable in x and the weight; the
/// backward recomputes from x, so only x is kept.
torch::Tensor KdaShortConvChunked(const torch::Tensor& x, const torch::Tensor& weight, std::int64_t heads,
                                  std::int64_t chunk, bool l2, double scale, double eps);

/// KdaImpl's in-chunk cumulative log decay, chunked as KdaShortConvChunked's
/// outputs: the inclusive sum within each chunk of -exp(a_log[h]) *
/// softplus(f + dt_bias) from the gate projection f [B, T, heads * dim].
/// Differentiable in f, a_log [heads] and dt_bias [heads * dim].
torch::Tensor KdaGateCumChunked(const torch::Tensor& f, const torch::Tensor& a_log, const torch::Tensor& dt_bias,
                                std::int64_t heads, std::int64_t chunk);

/// True when SwiGluKernel takes these: built, one shape, both fp32 or both
/// bf16 on a Hopper or newer GPU.
bool SwiGluKernelApplies(const torch::Tensor& gate, const torch::Tensor& up);

/// silu(gate) * up by the kernel, in their dtype; differentiable in both,
/// keeping only gate and up for the backward.
torch::Tensor SwiGluKernel(const torch::Tensor& gate, const torch::Tensor& up);

/// True when CrossEntropyKernel takes logits [N, V]: built, fp32 or bf16 on
/// a Hopper or newer GPU.
bool CrossEntropyKernelApplies(const torch::Tensor& logits);

/// Per-row cross entropy [N] fp32 of logits [N, V] against targets [N]
/// (int64), as torch's cross_entropy of the fp32 logits without reduction:
/// 0 for targets of -100 (torch's ignore_index), NaN for other targets
/// outside [0, V). Differentiable in the logits; keeps the logits and one
/// log-sum-exp per row, and writes the gradient in the logits' dtype.
torch::Tensor CrossEntropyKernel(const torch::Tensor& logits, const torch::Tensor& targets);

/// True when LinearCrossEntropyKernel takes rows x [N, D] and the weight
/// [V, D]: built, x fp32 or bf16 on a Hopper or newer GPU, the weight fp32
/// or bf16 on the same device.
bool LinearCrossEntropyKernelApplies(const torch::Tensor& x, const torch::Tensor& weight);

/// The sum over rows of CrossEntropyKernel(torch::linear(x, weight cast to
/// x's dtype), targets), without ever holding all N x V logits: the rows go
/// in chunks of `rows_per_chunk` (0: ~64M logits a chunk), and each chunk's
/// gradients with respect to x and the weight are made in the forward, so
/// the backward only scales them by the incoming gradient. Differentiable in
/// x and the weight (an fp32 gradient); keeps dx [N, D] in x's dtype and
/// dweight [V, D] fp32 instead of the logits.
torch::Tensor LinearCrossEntropyKernel(const torch::Tensor& x, const torch::Tensor& weight,
                                       const torch::Tensor& targets, std::int64_t rows_per_chunk = 0);

/// True when KdaChunkProductsKernel takes q [B, H, n, C, dk] and v [B, H, n,
/// C, dv]: built, fp32 on a Hopper or newer GPU, dk and dv multiples of 32 up
/// to 256, C <= max(dk, dv) and C * max(dk, dv) <= 8192.
bool KdaChunkProductsKernelApplies(const torch::Tensor& q, const torch::Tensor& v);

/// KdaChunkedCore's elementwise products of its chunked inputs (attention.h),
/// with G = g_cum and G_C each chunk's last row: {q e^G, beta k e^G,
/// k e^{G_C - G}, beta v, e^{G_C} [B, H, n, dk]}; beta [B, H, n, C, 1].
/// Differentiable in all five inputs; keeps only the inputs.
std::vector<torch::Tensor> KdaChunkProductsKernel(const torch::Tensor& q, const torch::Tensor& k,
                                                  const torch::Tensor& v, const torch::Tensor& g_cum,
                                                  const torch::Tensor& beta);

/// True when KdaChunkCoreKernel takes q [B, H, n, C, dk] and v [B, H, n, C,
/// dv]: the chunk products' and the scan's conditions together.
bool KdaChunkCoreKernelApplies(const torch::Tensor& q, const torch::Tensor& v);

/// KdaChunkedCore (attention.h) after the intra-chunk products: from its
/// chunked inputs, the inverse of I + Diag(beta) A and the intra-chunk qk
/// [B, H, n, C, C], and the initial state s0 [B, H, dk, dv], the output
/// [B, H, n, C, dv] and the final state, by the products, the UT
/// transform's products, the scan and the output products. One autograd
/// node, differentiable in all eight inputs, which keeps its inputs, u and
/// the chunk-start states only: the backward makes the products again.
std::pair<torch::Tensor, torch::Tensor> KdaChunkCoreKernel(const torch::Tensor& q, const torch::Tensor& k,
                                                           const torch::Tensor& v, const torch::Tensor& g_cum,
                                                           const torch::Tensor& beta, const torch::Tensor& inverse,
                                                           const torch::Tensor& qk, const torch::Tensor& s0);

/// True when CastKernel takes x to `dtype`: built, x fp32 on a Hopper or
/// newer GPU, dtype bf16.
bool CastKernelApplies(const torch::Tensor& x, c10::ScalarType dtype);

/// x.to(dtype), bit for bit, by the kernel; differentiable, the gradient
/// cast back to fp32 by the kernel too.
torch::Tensor CastKernel(const torch::Tensor& x, c10::ScalarType dtype);

/// True when MoeCombineKernel takes expert-sorted rows [N k, D] with k
/// slots per token: built, fp32 or bf16 on a Hopper or newer GPU, 1 <= k <=
/// 16, D a multiple of 32.
bool MoeCombineKernelApplies(const torch::Tensor& rows, std::int64_t k);

/// The MoE's combination (layers.h, MoeImpl): y [N, D] in the rows' dtype,
/// y[t] = sum_j weights[t][j] rows[row_of[t k + j]] in fp32, with row_of [N k]
/// int64 a permutation and weights [N, k] fp32. Differentiable in the rows
/// and the weights.
torch::Tensor MoeCombineKernel(const torch::Tensor& rows, const torch::Tensor& row_of, const torch::Tensor& weights);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_MODEL_CUDA_KERNELS_H_
