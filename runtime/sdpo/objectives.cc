// What the actor learns from a batch: the response rows and their
// log-probabilities, the feedback, the warm-start and loop objectives (as a
// pipeline micro-batch loss), and the step's records.
#include "runtime/sdpo/sdpo_loop.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <numeric>
#include <vector>

#include <torch/torch.h>

#include "common/clock.h"
#include "runtime/model/model.h"
#include "runtime/sdpo/rollout.h"
#include "runtime/sdpo/sdpo_loop_internal.h"
#include "runtime/sdpo/sdpo_loss.h"
#include "runtime/sdpo/weight_sync.h"

namespace kp::runtime {

ResponseRows MakeResponseRows(const std::vector<std::vector<std::int64_t>>& contexts,
                              const std::vector<std::vector<std::int64_t>>& responses, torch::Device device) {
  const auto n = static_cast<std::int64_t>(contexts.size());
  std::int64_t longest_input = 1, longest_response = 1;
  for (std::int64_t i = 0; i < n; ++i) {
    longest_input = std::max<std::int64_t>(longest_input, contexts[i].size() + responses[i].size() - 1);
    longest_response = std::max<std::int64_t>(longest_response, responses[i].size());
  }
  // Right-padding is safe: a causal model never attends to the padding of a
  // row before that row's own tokens.
  std::vector<std::int64_t> input(n * longest_input, ByteTokenizer::kPad), where(n * longest_response, 0);
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<std::int64_t> row = contexts[i];
    row.insert(row.end(), responses[i].begin(), responses[i].end());
    std::copy(row.begin(), row.end() - 1, input.begin() + i * longest_input);
    const auto first = static_cast<std::int64_t>(contexts[i].size()) - 1;
    for (std::int64_t t = 0; t < longest_response; ++t)
      where[i * longest_response + t] = std::min(first + t, longest_input - 1);
  }
  return {torch::tensor(input, torch::kLong).view({n, longest_input}).to(device),
          torch::tensor(where, torch::kLong).view({n, longest_response}).to(device)};
}

torch::Tensor PickResponseLogits(const torch::Tensor& logits, const torch::Tensor& where) {
  const std::int64_t n = where.size(0), l = where.size(1);
  const torch::Tensor picked = logits.gather(1, where.unsqueeze(-1).expand({n, l, logits.size(-1)}));
  // The rollout never samples ids past the tokenizer's (SamplingOptions::
  // vocab_limit); the trained distributions leave them out the same way, so
  // that the importance ratios compare like with like.
  if (picked.size(-1) == ByteTokenizer::kVocabSize) return picked;
  const torch::Tensor outside = torch::arange(picked.size(-1), where.options()) >= ByteTokenizer::kVocabSize;
  return picked.masked_fill(outside, -std::numeric_limits<float>::infinity());
}

torch::Tensor ResponseLogits(StageModelImpl& model, const std::vector<std::vector<std::int64_t>>& contexts,
                             const std::vector<std::vector<std::int64_t>>& responses, torch::Device device) {
  const ResponseRows rows = MakeResponseRows(contexts, responses, device);
  return PickResponseLogits(model.forward(rows.input), rows.where);
}

torch::Tensor TokenLogProbs(const torch::Tensor& logits, const torch::Tensor& ids) {
  return torch::log_softmax(logits, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1);
}

std::pair<torch::Tensor, torch::Tensor> PadResponses(const std::vector<std::vector<std::int64_t>>& responses,
                                                     torch::Device device) {
  const auto n = static_cast<std::int64_t>(responses.size());
  std::int64_t longest = 1;
  for (const auto& r : responses) longest = std::max<std::int64_t>(longest, r.size());
  std::vector<std::int64_t> ids(n * longest, 0);
  std::vector<float> mask(n * longest, 0.f);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::size_t t = 0; t < responses[i].size(); ++t) {
      ids[i * longest + t] = responses[i][t];
      mask[i * longest + t] = 1.f;
    }
  return {torch::tensor(ids, torch::kLong).view({n, longest}).to(device),
          torch::tensor(mask, torch::kFloat).view({n, longest}).to(device)};
}

std::int64_t FirstTask(const SdpoConfig& c, int step) { return static_cast<std::int64_t>(step - 1) * c.prompts; }

SyncMode LoopSyncMode(const SdpoConfig& c) { return c.train.lora.enabled() ? SyncMode::kLora : SyncMode::kFull; }

void RecordBatch(const RolloutBatch& batch, const Feedback& feedback, double teacher_s, double step_seconds,
                 LoopStepMetrics& m) {
  m.reward_mean = feedback.reward_mean;
  m.response_tokens_mean =
      static_cast<double>(feedback.response_tokens) / std::max<std::size_t>(1, batch.samples.size());
  m.sample_text = feedback.sample_text;
  m.feedback_s = feedback.seconds;
  m.teacher_s = teacher_s;
  m.generated_tokens = batch.stats.generated_tokens;
  m.generation_s = batch.stats.seconds;
  m.train.step_seconds = step_seconds;
  m.train.tokens_per_s = feedback.response_tokens / std::max(step_seconds, 1e-9);
}

void RecordSync(const SyncStats& s, SyncMode mode, LoopStepMetrics& m) {
  m.sync_version = s.version;
  m.sync_bytes = s.bytes;
  m.sync_buckets = s.buckets;
  m.sync_s = s.seconds;
  m.sync_mode = mode == SyncMode::kLora ? "lora" : "full";
}

Feedback RunFeedback(const SdpoConfig& c, const TaskSource& tasks, const RolloutBatch& batch) {
  Stopwatch watch;
  const ByteTokenizer tok;
  Feedback f;
  const int n_per_prompt = c.sampling.samples;
  const auto n = static_cast<std::int64_t>(batch.samples.size());
  for (std::int64_t g = 0; g < n / n_per_prompt; ++g) {
    const Task task = tasks.At(batch.first_task + batch.samples[g * n_per_prompt].prompt);
    std::vector<std::string> texts, corrections;
    std::vector<double> group_rewards;
    for (int j = 0; j < n_per_prompt; ++j) {
      const Sample& s = batch.samples[g * n_per_prompt + j];
      // The verifier reads the bytes before the stop token.
      texts.push_back(tok.DecodeResponse(s.response));
      const Verdict v = Verify(task, texts.back());
      group_rewards.push_back(v.reward);
      corrections.push_back(v.correction);
      f.prompts.push_back(tok.EncodePrompt(task.prompt));
      f.responses.push_back(s.response);
      f.response_tokens += static_cast<std::int64_t>(s.response.size());
    }
    for (const TeacherContext& t :
         BuildTeacherContexts(tok, task.prompt, texts, group_rewards, corrections, c.reprompt)) {
      f.teacher_contexts.push_back(t.prompt_ids);
      f.distill_rows.push_back(t.distill ? 1.f : 0.f);
    }
    if (g == 0) f.sample_text = task.prompt + texts[0];
    f.rewards.insert(f.rewards.end(), group_rewards.begin(), group_rewards.end());
  }
  f.reward_mean = std::accumulate(f.rewards.begin(), f.rewards.end(), 0.0) / std::max<std::int64_t>(n, 1);
  f.seconds = watch.Seconds();
  return f;
}

namespace {

// The rollout's log-probabilities of its samples, padded like the ids.
torch::Tensor OldLogProbs(const RolloutBatch& batch, std::int64_t longest, torch::Device device) {
  const auto n = static_cast<std::int64_t>(batch.samples.size());
  std::vector<float> v(n * longest, 0.f);
  for (std::int64_t i = 0; i < n; ++i)
    std::copy(batch.samples[i].logprobs.begin(), batch.samples[i].logprobs.end(), v.begin() + i * longest);
  return torch::tensor(v, torch::kFloat).view({n, longest}).to(device);
}

}  // namespace

ResponseObjective WarmStartObjective(const torch::Tensor& ids, const torch::Tensor& mask) {
  return {mask, [ids](const torch::Tensor& logits, std::int64_t first, std::int64_t rows) {
            return -TokenLogProbs(logits, ids.narrow(0, first, rows));
          }};
}

ResponseObjective LoopObjective(const SdpoConfig& c, const Feedback& feedback, const RolloutBatch& batch,
                                const torch::Tensor& teacher_logits, torch::Device device) {
  auto [ids, mask] = PadResponses(feedback.responses, device);
  const torch::Tensor old_logp = OldLogProbs(batch, ids.size(1), device);
  const double temperature = c.sampling.temperature;
  const torch::Tensor distill_mask =
      mask * torch::tensor(feedback.distill_rows, torch::kFloat).to(device).unsqueeze(1);
  // Each loss's terms of rows [first, first + rows).
  switch (c.loss) {
    case LossMode::kSdpo:
      return {distill_mask, [=](const torch::Tensor& logits, std::int64_t first, std::int64_t rows) {
                const torch::Tensor z = logits / temperature;
                const torch::Tensor logp = TokenLogProbs(z, ids.narrow(0, first, rows));
                return SdpoTokenLoss(z, teacher_logits.narrow(0, first, rows), logp,
                                     old_logp.narrow(0, first, rows), c.distill);
              }};
    case LossMode::kK1Opd:
      return {distill_mask, [=](const torch::Tensor& logits, std::int64_t first, std::int64_t rows) {
                const torch::Tensor z = logits / temperature;
                const torch::Tensor id = ids.narrow(0, first, rows);
                return K1OpdTokenLoss(TokenLogProbs(z, id), old_logp.narrow(0, first, rows),
                                      TokenLogProbs(teacher_logits.narrow(0, first, rows), id), c.clip);
              }};
    case LossMode::kGrpo:
      break;
  }
  const torch::Tensor adv = GrpoAdvantages(torch::tensor(feedback.rewards, torch::kDouble), c.sampling.samples)
                                .to(torch::kFloat)
                                .to(device)
                                .unsqueeze(1);
  return {mask, [=](const torch::Tensor& logits, std::int64_t first, std::int64_t rows) {
            const torch::Tensor logp = TokenLogProbs(logits / temperature, ids.narrow(0, first, rows));
            return ClippedPolicyLoss(logp, old_logp.narrow(0, first, rows), adv.narrow(0, first, rows), c.clip);
          }};
}

PipelineObjective::PipelineObjective(ResponseObjective objective, torch::Tensor where, int microbatches)
    : objective_(std::move(objective)), where_(std::move(where)), microbatches_(microbatches) {
  tokens_ = objective_.mask.to(torch::kFloat).sum().clamp_min(1.0);
}

torch::Tensor PipelineObjective::Share(const torch::Tensor& logits, int m) {
  const std::int64_t rows = where_.size(0) / microbatches_, first = m * rows;
  const torch::Tensor picked = PickResponseLogits(logits, where_.narrow(0, first, rows));
  const torch::Tensor mask = objective_.mask.narrow(0, first, rows).to(torch::kFloat);
  return (objective_.terms(picked, first, rows) * mask).sum() / tokens_;
}

Result<std::shared_ptr<StageModelImpl>> BuildPolicy(const SdpoConfig& c, torch::Device device) {
  ModelOptions options = c.train.options;
  options.seed = c.train.seed;
  torch::manual_seed(c.train.seed);
  KP_ASSIGN_OR_RETURN(auto model, BuildModel(c.train.model, options));
  model->to(device);
  return model;
}

}  // namespace kp::runtime
