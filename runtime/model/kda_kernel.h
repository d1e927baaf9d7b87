// LibTorch faces of the CUDA KDA kernels (kda_cuda.h): the intra-chunk
// products as a differentiable function, the recurrent steps for decoding.
// In a build without them (no CUDA Toolkit or a CPU LibTorch) the *Applies
// functions return false and callers keep the torch forms of attention.h.
#ifndef KIMI_PLAN_RUNTIME_MODEL_KDA_KERNEL_H_
#define KIMI_PLAN_RUNTIME_MODEL_KDA_KERNEL_H_

#include <cstdint>
#include <utility>

#include <torch/torch.h>

namespace kp::runtime {

/// True when this build has the KDA kernels.
bool KdaKernelsBuilt();

/// True when KdaIntraChunk takes chunked tensors like `q` ([B, H, n, C, dk]):
/// built, fp32, on a CUDA device, C in {16, 32, 64}, dk a multiple of 32.
bool KdaIntraKernelApplies(const torch::Tensor& q);

/// The strict-lower A and lower-inclusive P of KdaChunked (attention.cc),
/// from q, k and the in-chunk cumulative log decay `g_cum`, all
/// [B, H, n, C, dk] fp32 on one CUDA device; returns [B, H, n, C, C] each.
/// Differentiable with respect to all three (no double backward).
std::pair<torch::Tensor, torch::Tensor> KdaIntraChunk(const torch::Tensor& q, const torch::Tensor& k,
                                                      const torch::Tensor& g_cum);

/// True when KdaStateScan takes w [B, H, n, C, dv] and y [B, H, n, C, dk]:
/// built, fp32 on a CUDA device, C in {16, 32, 64}, dk 64 or 128, dv a
/// multiple of 32.
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
/// built, fp32, on a CUDA device, dk 64 or 128, dv a multiple of 32, and no
/// gradient wanted (the kernel has no backward: it serves decoding).
bool KdaRecurrentKernelApplies(const torch::Tensor& q, const torch::Tensor& v);

/// KdaRecurrent's result (attention.h) by the kernel; `initial_state` may
/// be undefined (zeros). `final_state`, when given, gets a new tensor.
torch::Tensor KdaRecurrentKernel(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& initial_state,
                                 torch::Tensor* final_state);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_MODEL_KDA_KERNEL_H_
