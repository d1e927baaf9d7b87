// The pieces of the SDPO loop its tests reach: how the trainer turns
// (context, response) pairs into the logits and log-probabilities the losses
// take. Not part of the CLI's view (sdpo_loop.h has no LibTorch).
#ifndef KIMI_PLAN_RUNTIME_SDPO_LOOP_INTERNAL_H_
#define KIMI_PLAN_RUNTIME_SDPO_LOOP_INTERNAL_H_

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "runtime/model.h"

namespace kp::runtime {

/// The logits that predict each response token: rows are context_i ++
/// response_i, right-padded with PAD. Returns [N, L, V] fp32 with L the
/// longest response; position t of row i predicts response_i[t] (positions
/// past a row's response repeat its last logits and are masked by callers).
/// Ids >= ByteTokenizer::kVocabSize get -inf, as the rollout never samples them.
torch::Tensor ResponseLogits(StageModelImpl& model, const std::vector<std::vector<std::int64_t>>& contexts,
                             const std::vector<std::vector<std::int64_t>>& responses, torch::Device device);

/// log_softmax(logits)[ids] over the last dimension: logits [..., V], ids [...].
torch::Tensor TokenLogProbs(const torch::Tensor& logits, const torch::Tensor& ids);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_SDPO_LOOP_INTERNAL_H_
