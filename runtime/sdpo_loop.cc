#include "runtime/sdpo_loop.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "common/clock.h"
#include "runtime/in_process_communicator.h"
#include "runtime/model.h"
#include "runtime/rollout.h"
#include "runtime/sdpo_loop_internal.h"
#include "runtime/sdpo_loss.h"
#include "runtime/trainer_internal.h"
#include "runtime/weight_sync.h"
#include "simulator/schedule_generators.h"
#include "specs/schedule_kind.h"

namespace kp::runtime {

Result<LossMode> ParseLossMode(std::string_view name) {
  if (name == "sdpo") return LossMode::kSdpo;
  if (name == "grpo") return LossMode::kGrpo;
  if (name == "k1-opd") return LossMode::kK1Opd;
  return Status::InvalidArgument("--loss: unknown loss '" + std::string(name) + "' (allowed: sdpo, grpo, k1-opd)");
}

const char* LossModeName(LossMode m) {
  switch (m) {
    case LossMode::kSdpo: return "sdpo";
    case LossMode::kGrpo: return "grpo";
    case LossMode::kK1Opd: return "k1-opd";
  }
  return "?";
}

Result<Placement> ParsePlacement(std::string_view name) {
  if (name == "colocated") return Placement::kColocated;
  if (name == "split") return Placement::kSplit;
  return Status::InvalidArgument("--placement: unknown placement '" + std::string(name) +
                                 "' (allowed: colocated, split)");
}

const char* PlacementName(Placement p) { return p == Placement::kSplit ? "split" : "colocated"; }

Result<RepromptTemplate> ParseRepromptTemplate(std::string_view name) {
  if (name == "reference") return RepromptTemplate{};
  if (name == "compact") {
    RepromptTemplate t;
    t.reprompt = "{prompt}{solution}{feedback}\nSolve:";
    t.solution = "\nCorrect: {successful_previous_attempt}";
    t.feedback = "\nFeedback: {feedback_raw}";
    return t;
  }
  return Status::InvalidArgument("--reprompt: unknown template '" + std::string(name) +
                                 "' (allowed: reference, compact)");
}

namespace {

// The actor's pipeline is checked here, before any rank starts, with the
// schedule generator the ranks will use.
Status ValidateActorPipeline(const SdpoConfig& c) {
  const SdpoConfig::ActorPipeline& a = c.actor;
  if (a.pp < 1) return Status::InvalidArgument("--pp: must be at least 1");
  if (a.vp < 1) return Status::InvalidArgument("--vp: must be at least 1");
  if (c.placement == Placement::kColocated && (a.pp > 1 || a.vp > 1))
    return Status::InvalidArgument("--pp: the colocated placement runs the actor in one process (pp 1, vp 1); "
                                   "take --placement split for a pipeline");
  const int rows = c.prompts * c.sampling.samples;
  if (a.microbatches < 1 || rows % a.microbatches != 0)
    return Status::InvalidArgument("--microbatches: " + std::to_string(a.microbatches) +
                                   " must be positive and divide the " + std::to_string(rows) +
                                   " responses of a step (--prompts x --samples)");
  if (c.sft_steps > 0 && c.sft_batch % a.microbatches != 0)
    return Status::InvalidArgument("--sft-batch: " + std::to_string(c.sft_batch) +
                                   " warm-start examples do not split into --microbatches " +
                                   std::to_string(a.microbatches));
  return ActorStagesOf(c).status();
}

}  // namespace

Result<ActorStages> ActorStagesOf(const SdpoConfig& c) {
  const SdpoConfig::ActorPipeline& a = c.actor;
  KP_ASSIGN_OR_RETURN(const ScheduleKind kind, ParseSchedule(a.schedule));
  KP_ASSIGN_OR_RETURN(const PipelineSchedule schedule,
                      GenerateSchedule(kind, a.pp, ScheduleTakesVp(kind) ? a.vp : 1, a.microbatches));
  Result<StageSplit> split = EvenSplit(c.train.model.layers, schedule.num_stages);
  if (!split.ok())
    return Status::InvalidArgument("--pp: " + std::to_string(a.pp) + " ranks x " +
                                   std::to_string(schedule.StagesPerRank()) + " stages do not split " +
                                   std::to_string(c.train.model.layers) + " layers: " + split.status().message());
  return ActorStages{schedule.stage_to_rank, *split};
}

Status ValidateSdpoConfig(const SdpoConfig& c) {
  KP_RETURN_IF_ERROR(ValidateTrainConfig(c.train));
  KP_RETURN_IF_ERROR(ValidateSamplingOptions(c.sampling));
  KP_RETURN_IF_ERROR(ValidateSdpoOptions(c.distill, c.clip));
  if (c.train.model.vocab < ByteTokenizer::kVocabSize)
    return Status::InvalidArgument("--vocab: the loop's byte tokenizer needs at least " +
                                   std::to_string(ByteTokenizer::kVocabSize) + " ids, got " +
                                   std::to_string(c.train.model.vocab));
  if (c.sampling.temperature <= 0)
    return Status::InvalidArgument("--temperature: the loop trains on sampled responses and needs > 0");
  if (c.prompts < 1) return Status::InvalidArgument("--prompts: must be at least 1");
  if (!(c.teacher_ema >= 0 && c.teacher_ema <= 1)) return Status::InvalidArgument("--teacher-ema: must be in [0, 1]");
  if (c.sft_steps < 0) return Status::InvalidArgument("--sft-steps: must be >= 0");
  if (c.sft_batch < 1) return Status::InvalidArgument("--sft-batch: must be at least 1");
  if (!(c.sft_lr > 0)) return Status::InvalidArgument("--sft-lr: must be positive");
  if (!(c.sft_context_share >= 0 && c.sft_context_share <= 1))
    return Status::InvalidArgument("--sft-context-share: must be in [0, 1]");
  if (c.sync_bucket_bytes < 1) return Status::InvalidArgument("--sync-bucket-mb: must be positive");
  KP_RETURN_IF_ERROR(ValidateActorPipeline(c));
  if (c.placement == Placement::kSplit) {
    if (c.rollout_ranks < 1) return Status::InvalidArgument("--rollout-ranks: must be at least 1");
    if (c.prompts % c.rollout_ranks != 0)
      return Status::InvalidArgument("--prompts: " + std::to_string(c.prompts) + " do not split evenly over " +
                                     std::to_string(c.rollout_ranks) + " rollout ranks");
  }
  return Status::Ok();
}

SplitRanks SplitRanksOf(const SdpoConfig& c) {
  SplitRanks r;
  r.actor = c.actor.pp;
  r.teacher = c.loss == LossMode::kGrpo ? -1 : r.actor;
  r.first_rollout = r.actor + (r.teacher >= 0 ? 1 : 0);
  r.world = r.first_rollout + c.rollout_ranks;
  return r;
}

std::string SdpoConfigJson(const SdpoConfig& c) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(TrainConfigJson(c.train));
  j["task"] = c.task;
  j["min_digits"] = c.task_options.min_digits;
  j["max_digits"] = c.task_options.max_digits;
  j["prompts"] = c.prompts;
  j["samples"] = c.sampling.samples;
  j["temperature"] = c.sampling.temperature;
  j["top_p"] = c.sampling.top_p;
  j["max_new_tokens"] = c.sampling.max_new_tokens;
  j["loss"] = LossModeName(c.loss);
  j["top_k"] = c.distill.top_k;
  j["alpha"] = c.distill.alpha;
  j["is_clip"] = c.distill.is_clip;
  j["teacher_ema"] = c.teacher_ema;
  j["sft_steps"] = c.sft_steps;
  j["sft_batch"] = c.sft_batch;
  j["sft_lr"] = c.sft_lr;
  j["sft_context_share"] = c.sft_context_share;
  j["placement"] = PlacementName(c.placement);
  j["rollout_ranks"] = c.rollout_ranks;
  j["pp"] = c.actor.pp;
  j["vp"] = c.actor.vp;
  j["microbatches"] = c.actor.microbatches;
  j["schedule"] = c.actor.schedule;
  j["attnres_cache"] = c.actor.attnres_cache;
  j["sync_bucket_bytes"] = c.sync_bucket_bytes;
  j["sync"] = c.train.lora.enabled() ? "lora" : "full";
  return j.dump();
}

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

// The warm start's objective: the negative log-likelihood of the answers.
ResponseObjective WarmStartObjective(const torch::Tensor& ids, const torch::Tensor& mask) {
  return {mask, [ids](const torch::Tensor& logits, std::int64_t first, std::int64_t rows) {
            return -TokenLogProbs(logits, ids.narrow(0, first, rows));
          }};
}

}  // namespace

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

// ---------------------------------------------------------------- actor

namespace {

// Warm-start examples come from indices far from the loop's, so that on a
// task family with many problems the loop's prompts are mostly unseen.
constexpr std::int64_t kWarmStartTaskOffset = std::int64_t{1} << 40;

// A wrong answer for the warm start's feedback examples: the answer with its
// last character changed, so the correction names the right answer.
std::string WrongAnswer(const std::string& answer, std::int64_t index) {
  std::string wrong = answer;
  char& last = wrong.back();
  if (last >= '0' && last <= '9') last = static_cast<char>('0' + (last - '0' + 1 + index % 9) % 10);
  else wrong += "x";
  return wrong;
}

// The pipeline's configuration for one phase of the actor's training.
Result<PipelineRankConfig> ActorPipelineConfig(const SdpoConfig& c, const TrainConfig& phase) {
  PipelineRankConfig p;
  p.train = phase;
  p.pp = c.actor.pp;
  p.vp = c.actor.vp;
  p.microbatches = c.actor.microbatches;
  p.attnres_cache = c.actor.attnres_cache;
  KP_ASSIGN_OR_RETURN(p.schedule, ParseSchedule(c.actor.schedule));
  return p;
}

// The warm start trains full weights at a constant --sft-lr on --sft-batch
// examples; the loop's own schedule, batch and LoRA come in BeginLoop.
TrainConfig WarmStartPhase(const SdpoConfig& c) {
  TrainConfig t = c.train;
  t.lr = c.sft_lr;
  t.warmup = 0;
  t.min_lr_ratio = 1.0;
  t.steps = std::max(1, c.sft_steps);
  // Without a warm start the phase is never stepped: it takes the loop's
  // batch, which --microbatches is checked against.
  t.batch = c.sft_steps > 0 ? c.sft_batch : c.prompts * c.sampling.samples;
  t.lora = LoraOptions{};
  return t;
}

TrainConfig LoopPhase(const SdpoConfig& c) {
  TrainConfig t = c.train;
  t.batch = c.prompts * c.sampling.samples;
  return t;
}

// Rows of `seq_len` + 1 ids for the pipeline: the inputs and a last column
// the objective does not read.
std::vector<std::int64_t> PipelineTokens(const torch::Tensor& input) {
  const torch::Tensor rows =
      torch::cat({input.cpu(), torch::full({input.size(0), 1}, ByteTokenizer::kPad, torch::kLong)}, 1).contiguous();
  return std::vector<std::int64_t>(rows.data_ptr<std::int64_t>(), rows.data_ptr<std::int64_t>() + rows.numel());
}

}  // namespace

Result<std::unique_ptr<ActorRank>> ActorRank::Create(const SdpoConfig& c, Communicator& pipeline,
                                                     const FileSystem& fs) {
  auto a = std::unique_ptr<ActorRank>(new ActorRank(c, pipeline, fs));
  KP_ASSIGN_OR_RETURN(a->device_, ParseDevice(c.train.device));
  KP_ASSIGN_OR_RETURN(a->tasks_, MakeTaskSource(fs, c.task, c.task_options));
  KP_ASSIGN_OR_RETURN(const PipelineRankConfig first, ActorPipelineConfig(c, WarmStartPhase(c)));
  KP_ASSIGN_OR_RETURN(a->rank_, PipelineRank::Create(first, pipeline));
  return a;
}

// Example `index` is in the teacher's format for a share sft_context_share
// of the indices (alternating a correct solution and the correction of a
// wrong answer), else the plain prompt.
std::string ActorRank::WarmStartContext(const Task& task, std::int64_t index) const {
  const std::int64_t per_thousand = static_cast<std::int64_t>(config_.sft_context_share * 1000 + 0.5);
  const std::int64_t slot = (index * 617) % 1000;  // 617 is coprime to 1000: every slot once per 1000
  if (slot >= per_thousand) return task.prompt;
  if (slot % 2 == 0) return RepromptText(task.prompt, task.answer, std::nullopt, config_.reprompt.text);
  const std::string correction = Verify(task, WrongAnswer(task.answer, index)).correction;
  return RepromptText(task.prompt, std::nullopt, correction, config_.reprompt.text);
}

Result<PipelineStepResult> ActorRank::TrainOn(const std::vector<std::vector<std::int64_t>>& contexts,
                                              const std::vector<std::vector<std::int64_t>>& responses,
                                              const ResponseObjective& objective) {
  const ResponseRows rows = MakeResponseRows(contexts, responses, device_);
  PipelineObjective loss(objective, rows.where, config_.actor.microbatches);
  return rank_->TrainStep(PipelineTokens(rows.input), static_cast<int>(rows.input.size(1)), loss);
}

Result<double> ActorRank::WarmStartStep(int step) {
  std::vector<std::vector<std::int64_t>> contexts, targets;
  for (int i = 0; i < config_.sft_batch; ++i) {
    const std::int64_t index = kWarmStartTaskOffset + static_cast<std::int64_t>(step) * config_.sft_batch + i;
    const Task task = tasks_->At(index);
    contexts.push_back(tok_.EncodePrompt(WarmStartContext(task, index)));
    std::vector<std::int64_t> answer = tok_.Encode(task.answer);
    answer.push_back(ByteTokenizer::kEos);
    targets.push_back(std::move(answer));
  }
  auto [ids, mask] = PadResponses(targets, device_);
  KP_ASSIGN_OR_RETURN(PipelineStepResult r, TrainOn(contexts, targets, WarmStartObjective(ids, mask)));
  return r.loss;
}

namespace {

Status Beat(Communicator& heartbeat, torch::Device device, bool more) {
  torch::Tensor flag = torch::full({1}, more ? 1 : 0, torch::dtype(torch::kLong).device(device));
  return heartbeat.Broadcast(flag, 0);
}

}  // namespace

Status AwaitWarmStart(Communicator& heartbeat, torch::Device device) {
  for (;;) {
    torch::Tensor flag = torch::zeros({1}, torch::dtype(torch::kLong).device(device));
    KP_RETURN_IF_ERROR(heartbeat.Broadcast(flag, 0).WithContext("waiting for the actor's warm start"));
    if (flag.cpu().item<std::int64_t>() == 0) return Status::Ok();
  }
}

Status ActorRank::WarmStart(LoopObserver& observer, Communicator* heartbeat) {
  for (int s = 0; s < config_.sft_steps; ++s) {
    Result<double> loss = Status::Internal("unset");
    try {
      loss = WarmStartStep(s);
    } catch (const c10::Error& e) {
      return Status::Internal(std::string("warm start: ") + e.what_without_backtrace());
    }
    if (!loss.ok()) return loss.status().WithContext("warm start");
    if ((s + 1) % 10 == 0 || s + 1 == config_.sft_steps)
      KP_RETURN_IF_ERROR(observer.OnWarmStart(s + 1, config_.sft_steps, *loss));
    if (heartbeat != nullptr) KP_RETURN_IF_ERROR(Beat(*heartbeat, device_, true));
  }
  return heartbeat != nullptr ? Beat(*heartbeat, device_, false) : Status::Ok();
}

Status ActorRank::BeginLoop() { return rank_->BeginPhase(LoopPhase(config_)); }

Result<LoopStepMetrics> ActorRank::Learn(const RolloutBatch& batch, const Feedback& feedback,
                                         const torch::Tensor& teacher_logits) {
  LoopStepMetrics m;
  m.weight_version = batch.weight_version;
  Stopwatch watch;
  try {
    const ResponseObjective objective = LoopObjective(config_, feedback, batch, teacher_logits, device_);
    KP_ASSIGN_OR_RETURN(PipelineStepResult r, TrainOn(feedback.prompts, feedback.responses, objective));
    m.train.step = r.step;
    m.train.loss = r.loss;
    m.train.grad_norm = r.grad_norm;
    m.train.lr = r.lr;
  } catch (const c10::Error& e) {
    return Status::Internal("step " + std::to_string(rank_->step() + 1) + ": " + e.what_without_backtrace());
  }
  (config_.loss == LossMode::kGrpo ? m.pg_loss : m.distill_loss) = m.train.loss;
  m.train_s = watch.Seconds();
  // The process's peak RSS (the stages, the optimizer); not measured on CUDA yet.
  if (!device_.is_cuda()) m.train.peak_memory_bytes = PeakRssBytes(fs_);
  return m;
}

std::vector<NamedTensor> ActorRank::Synced(SyncMode mode) {
  std::vector<NamedTensor> out;
  for (int s : rank_->stages()) {
    StageModelImpl* model = ModelOfStage(rank_->stage_module(s));
    if (model == nullptr) continue;
    for (NamedTensor& t : SyncedTensors(*model, mode)) out.push_back(std::move(t));
  }
  return out;
}

Result<std::pair<std::int64_t, std::int64_t>> ActorRank::CountParameters() {
  std::int64_t all = 0, trainable = 0;
  for (int s : rank_->stages()) {
    StageModelImpl* model = ModelOfStage(rank_->stage_module(s));
    if (model == nullptr) continue;
    all += CountElements(model->parameters());
    trainable += CountElements(model->TrainableParameters());
  }
  torch::Tensor counts = torch::tensor({static_cast<double>(all), static_cast<double>(trainable)}, torch::kDouble);
  if (pipeline_.size() > 1) {
    KP_ASSIGN_OR_RETURN(const torch::Device device, ParseDevice(config_.train.device));
    counts = counts.to(device);
    KP_RETURN_IF_ERROR(pipeline_.AllReduceSum(counts));
    counts = counts.cpu();
  }
  return std::pair{static_cast<std::int64_t>(counts[0].item<double>()),
                   static_cast<std::int64_t>(counts[1].item<double>())};
}

// ---------------------------------------------------------------- teacher

Result<std::unique_ptr<Teacher>> Teacher::Create(const SdpoConfig& c) {
  auto t = std::unique_ptr<Teacher>(new Teacher(c));
  KP_ASSIGN_OR_RETURN(t->device_, ParseDevice(c.train.device));
  try {
    KP_ASSIGN_OR_RETURN(t->model_, BuildPolicy(c, t->device_));
    t->model_->eval();
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("building the teacher: ") + e.what_without_backtrace());
  }
  return t;
}

std::vector<NamedTensor> Teacher::Synced(SyncMode mode) { return SyncedTensors(*model_, mode); }

namespace {

std::vector<torch::Tensor> TensorsOf(const std::vector<NamedTensor>& named) {
  std::vector<torch::Tensor> out;
  for (const NamedTensor& t : named) out.push_back(t.tensor);
  return out;
}

}  // namespace

// An EMA step of rate 1 is a copy.
Status Teacher::Assign(const std::vector<NamedTensor>& student) {
  return EmaUpdate(TensorsOf(Synced(SyncMode::kFull)), TensorsOf(student), 1.0);
}

Status Teacher::Update(const std::vector<NamedTensor>& student) {
  return EmaUpdate(TensorsOf(Synced(LoopSyncMode(config_))), TensorsOf(student), config_.teacher_ema);
}

void Teacher::BeginLoop() {
  if (!config_.train.lora.enabled()) return;
  model_->EnableLora(config_.train.lora, config_.train.seed);
  model_->to(device_);
}

torch::Tensor Teacher::Score(const Feedback& feedback) {
  torch::NoGradGuard no_grad;
  return ResponseLogits(*model_, feedback.teacher_contexts, feedback.responses, device_) /
         config_.sampling.temperature;
}

// ---------------------------------------------------------------- rollout

Result<std::unique_ptr<Rollout>> Rollout::Create(const SdpoConfig& c, const FileSystem& fs) {
  auto r = std::unique_ptr<Rollout>(new Rollout(c));
  KP_ASSIGN_OR_RETURN(r->device_, ParseDevice(c.train.device));
  KP_ASSIGN_OR_RETURN(r->tasks_, MakeTaskSource(fs, c.task, c.task_options));
  try {
    KP_ASSIGN_OR_RETURN(r->model_, BuildPolicy(c, r->device_));
    r->engine_ = std::make_unique<RolloutEngine>(r->model_);
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("building the rollout: ") + e.what_without_backtrace());
  }
  return r;
}

std::vector<NamedTensor> Rollout::Synced(SyncMode mode) { return SyncedTensors(*model_, mode); }

void Rollout::BeginLoop() {
  if (!config_.train.lora.enabled()) return;
  model_->EnableLora(config_.train.lora, config_.train.seed);
  model_->to(device_);
}

Result<RolloutBatch> Rollout::Generate(int step, std::int64_t first, int count, std::int64_t version, int rank) {
  RolloutBatch b;
  b.first_task = first;
  b.weight_version = version;
  std::vector<std::vector<std::int64_t>> prompts;
  for (int i = 0; i < count; ++i) prompts.push_back(tok_.EncodePrompt(tasks_->At(first + i).prompt));
  SamplingOptions sampling = config_.sampling;
  sampling.vocab_limit = ByteTokenizer::kVocabSize;
  const std::uint64_t seed = config_.train.seed * 1000003u + static_cast<std::uint64_t>(step) * 131u + rank;
  KP_ASSIGN_OR_RETURN(b.samples, engine_->Generate(prompts, sampling, seed));
  b.stats = engine_->last_stats();
  return b;
}

// ---------------------------------------------------------------- colocated

namespace {

// The colocated placement's sync: the models live in one process, so the
// weights move by a copy per tensor (the resharding a hybrid engine does),
// measured like the c10d sync.
SyncStats CopyWeights(const std::vector<NamedTensor>& from, const std::vector<NamedTensor>& to,
                      std::int64_t version) {
  Stopwatch watch;
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < from.size(); ++i) to[i].tensor.copy_(from[i].tensor);
  SyncStats s;
  s.version = version;
  s.bytes = PayloadBytes(from);
  s.buckets = static_cast<int>(from.size());
  s.seconds = watch.Seconds();
  return s;
}

Status RunColocated(const SdpoConfig& config, const FileSystem& fs, LoopObserver& observer) {
  std::unique_ptr<Communicator> alone = MakeInProcessCommunicator(MakeInProcessWorld(1), 0);
  KP_ASSIGN_OR_RETURN(auto actor, ActorRank::Create(config, *alone, fs));
  std::unique_ptr<Teacher> teacher;
  if (config.loss != LossMode::kGrpo) {
    KP_ASSIGN_OR_RETURN(teacher, Teacher::Create(config));
  }
  KP_ASSIGN_OR_RETURN(auto rollout, Rollout::Create(config, fs));
  KP_ASSIGN_OR_RETURN(const auto counts, actor->CountParameters());
  KP_RETURN_IF_ERROR(observer.OnStart(counts.first, counts.second, actor->tasks().Describe()));
  KP_RETURN_IF_ERROR(actor->WarmStart(observer));
  LoopStepMetrics initial;
  RecordSync(CopyWeights(actor->Synced(SyncMode::kFull), rollout->Synced(SyncMode::kFull), 0), SyncMode::kFull,
             initial);
  if (teacher) KP_RETURN_IF_ERROR(teacher->Assign(actor->Synced(SyncMode::kFull)));
  KP_RETURN_IF_ERROR(observer.OnInitialSync(initial));
  KP_RETURN_IF_ERROR(actor->BeginLoop());
  if (teacher) teacher->BeginLoop();
  rollout->BeginLoop();
  const SyncMode mode = LoopSyncMode(config);
  for (int step = 1; step <= config.train.steps; ++step) {
    Stopwatch watch;
    KP_ASSIGN_OR_RETURN(RolloutBatch batch,
                        rollout->Generate(step, FirstTask(config, step), config.prompts, step - 1, 0));
    const Feedback feedback = RunFeedback(config, actor->tasks(), batch);
    torch::Tensor teacher_logits;
    double teacher_s = 0;
    if (teacher) {
      Stopwatch teacher_watch;
      teacher_logits = teacher->Score(feedback);
      teacher_s = teacher_watch.Seconds();
    }
    KP_ASSIGN_OR_RETURN(LoopStepMetrics m, actor->Learn(batch, feedback, teacher_logits));
    if (teacher) KP_RETURN_IF_ERROR(teacher->Update(actor->Synced(mode)));
    if (step < config.train.steps)
      RecordSync(CopyWeights(actor->Synced(mode), rollout->Synced(mode), step), mode, m);
    RecordBatch(batch, feedback, teacher_s, watch.Seconds(), m);
    KP_RETURN_IF_ERROR(observer.OnStep(m));
  }
  return Status::Ok();
}

}  // namespace

Status RunColocatedLoop(const SdpoConfig& config, const FileSystem& fs, LoopObserver& observer) {
  KP_RETURN_IF_ERROR(ValidateSdpoConfig(config));
  try {
    return RunColocated(config, fs, observer);
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("the SDPO loop: ") + e.what_without_backtrace());
  }
}

}  // namespace kp::runtime
