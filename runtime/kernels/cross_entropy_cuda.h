// The CUDA kernels of the language-model loss (docs/runtime.md §8): per-row
// cross entropy straight from bf16 or fp32 logits, forward and backward,
// fp32 inside. torch's form upcasts the whole [N, V] logits to fp32, keeps
// log_softmax's fp32 output for the backward and builds the gradient in
// fp32 before casting it: at N = 16k tokens and V = 32k, ~8 GB at the step's
// memory peak. These keep one fp32 log-sum-exp per row and write the
// gradient once in the logits' dtype. Deterministic (fixed reduction order).
// Plain pointers and a stream; cross_entropy.cc wraps them.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_CROSS_ENTROPY_CUDA_H_
#define KIMI_PLAN_RUNTIME_KERNELS_CROSS_ENTROPY_CUDA_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace kp::runtime::cuda {

/// `rows` rows of `vocab` logits, [rows, vocab] contiguous, bf16 or fp32;
/// targets [rows] int64.
struct LogitRows {
  std::int64_t rows = 0;
  std::int64_t vocab = 0;
  bool bf16 = false;
};

/// The target id whose rows are ignored (loss 0, no gradient), as torch's
/// default ignore_index.
constexpr std::int64_t kIgnoredTarget = -100;

/// loss[r] = logsumexp(logits[r]) - logits[r][target[r]] and lse[r], fp32;
/// loss 0 for an ignored target, NaN for any other target outside [0, vocab).
cudaError_t CrossEntropyForward(const LogitRows& shape, const void* logits, const std::int64_t* targets, float* loss,
                                float* lse, cudaStream_t stream);

/// dlogits[r][v] = dloss[r] (softmax(logits[r])[v] - [v == target[r]]), in
/// the logits' dtype; zero rows for ignored targets.
cudaError_t CrossEntropyBackward(const LogitRows& shape, const void* logits, const std::int64_t* targets,
                                 const float* lse, const float* dloss, void* dlogits, cudaStream_t stream);

}  // namespace kp::runtime::cuda

#endif  // KIMI_PLAN_RUNTIME_KERNELS_CROSS_ENTROPY_CUDA_H_
