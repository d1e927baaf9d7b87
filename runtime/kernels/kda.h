// LibTorch face of KDA: the intra-chunk products, the chunk scan, the chunked
// core after the intra-chunk products and the recurrent steps of a decode
// (kda_cuda.cu), with autograd. In a build without the CUDA kernels (no CUDA
// Toolkit or a CPU LibTorch) the *Applies functions return false and callers
// keep the torch forms.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_KDA_H_
#define KIMI_PLAN_RUNTIME_KERNELS_KDA_H_

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace kp::runtime {

/// How KDA's chunk scan and the chunked core's batched products multiply:
/// in fp32 on CUDA cores (the reference form), or as TF32 products with
/// fp32 accumulation on tensor cores (cuda::KdaScan's `tensor_cores`,
/// BatchedMatmulTf32: operands rounded to 10 mantissa bits, and in the
/// chunked core the kept chunk-start states to bf16's 7; deterministic).
/// Where the tensor-core form does not take a shape or a tensor's alignment
/// the fp32 form runs.
enum class KdaMath { kFp32, kTensorCores };

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
                           const torch::Tensor& decay, const torch::Tensor& s0, KdaMath math = KdaMath::kFp32);

/// True when KdaRecurrentKernel takes q [B, T, H, dk] and v [B, T, H, dv]:
/// built, fp32, on a Hopper or newer GPU, dk 64 or 128, dv a multiple of 32, and no
/// gradient wanted (the kernel has no backward: it serves decoding).
bool KdaRecurrentKernelApplies(const torch::Tensor& q, const torch::Tensor& v);

/// KdaRecurrent's result (attention.h) by the kernel; `initial_state` may
/// be undefined (zeros). `final_state`, when given, gets a new tensor.
torch::Tensor KdaRecurrentKernel(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& initial_state,
                                 torch::Tensor* final_state);

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
/// `math` is the scans' and the products' (forward and backward); on
/// tensor cores the kept chunk-start states are bf16.
std::pair<torch::Tensor, torch::Tensor> KdaChunkCoreKernel(const torch::Tensor& q, const torch::Tensor& k,
                                                           const torch::Tensor& v, const torch::Tensor& g_cum,
                                                           const torch::Tensor& beta, const torch::Tensor& inverse,
                                                           const torch::Tensor& qk, const torch::Tensor& s0,
                                                           KdaMath math = KdaMath::kFp32);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_KERNELS_KDA_H_
