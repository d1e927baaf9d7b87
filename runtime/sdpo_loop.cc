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
#include "runtime/c10d_communicator.h"
#include "runtime/model.h"
#include "runtime/rollout.h"
#include "runtime/sdpo_loop_internal.h"
#include "runtime/sdpo_loss.h"
#include "runtime/trainer_internal.h"
#include "runtime/weight_sync.h"

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
  if (c.placement == Placement::kSplit) {
    if (c.rollout_ranks < 1) return Status::InvalidArgument("--rollout-ranks: must be at least 1");
    if (c.prompts % c.rollout_ranks != 0)
      return Status::InvalidArgument("--prompts: " + std::to_string(c.prompts) + " do not split evenly over " +
                                     std::to_string(c.rollout_ranks) + " rollout ranks");
  }
  return Status::Ok();
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
  j["sync_bucket_bytes"] = c.sync_bucket_bytes;
  j["sync"] = c.train.lora.enabled() ? "lora" : "full";
  return j.dump();
}

// Right-padding is safe: a causal model never attends to the padding of a
// row before that row's own tokens.
torch::Tensor ResponseLogits(StageModelImpl& model, const std::vector<std::vector<std::int64_t>>& contexts,
                             const std::vector<std::vector<std::int64_t>>& responses, torch::Device device) {
  const auto n = static_cast<std::int64_t>(contexts.size());
  std::int64_t longest_input = 1, longest_response = 1;
  for (std::int64_t i = 0; i < n; ++i) {
    longest_input = std::max<std::int64_t>(longest_input, contexts[i].size() + responses[i].size() - 1);
    longest_response = std::max<std::int64_t>(longest_response, responses[i].size());
  }
  std::vector<std::int64_t> input(n * longest_input, ByteTokenizer::kPad), where(n * longest_response, 0);
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<std::int64_t> row = contexts[i];
    row.insert(row.end(), responses[i].begin(), responses[i].end());
    std::copy(row.begin(), row.end() - 1, input.begin() + i * longest_input);
    const auto first = static_cast<std::int64_t>(contexts[i].size()) - 1;
    for (std::int64_t t = 0; t < longest_response; ++t)
      where[i * longest_response + t] = std::min(first + t, longest_input - 1);
  }
  const torch::Tensor tokens = torch::tensor(input, torch::kLong).view({n, longest_input}).to(device);
  const torch::Tensor index = torch::tensor(where, torch::kLong).view({n, longest_response}).to(device);
  const torch::Tensor logits = model.forward(tokens);
  const torch::Tensor picked = logits.gather(1, index.unsqueeze(-1).expand({n, longest_response, logits.size(-1)}));
  // The rollout never samples ids past the tokenizer's (SamplingOptions::
  // vocab_limit); the trained distributions leave them out the same way, so
  // that the importance ratios compare like with like.
  if (picked.size(-1) == ByteTokenizer::kVocabSize) return picked;
  const torch::Tensor outside = torch::arange(picked.size(-1), index.options()) >= ByteTokenizer::kVocabSize;
  return picked.masked_fill(outside, -std::numeric_limits<float>::infinity());
}

torch::Tensor TokenLogProbs(const torch::Tensor& logits, const torch::Tensor& ids) {
  return torch::log_softmax(logits, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1);
}

namespace {

// The tasks of step `step` (1-based) start here.
std::int64_t FirstTask(const SdpoConfig& c, int step) { return static_cast<std::int64_t>(step - 1) * c.prompts; }

// Warm-start examples come from indices far from the loop's, so that on a
// task family with many problems the loop's prompts are mostly unseen.
constexpr std::int64_t kWarmStartTaskOffset = std::int64_t{1} << 40;

// What a rollout rank returns for one step: samples of prompts
// [first_task, first_task + prompts) of the task source.
struct RolloutBatch {
  std::int64_t first_task = 0;
  std::int64_t weight_version = 0;
  std::vector<Sample> samples;  // Sample::prompt relative to first_task
  GenerationStats stats;
};

// Builds the policy as TrainSession does: same seed, same weights on every
// rank, so rollout and teacher copies start equal to the student.
Result<std::shared_ptr<StageModelImpl>> BuildPolicy(const SdpoConfig& c, torch::Device device) {
  ModelOptions options = c.train.options;
  options.seed = c.train.seed;
  torch::manual_seed(c.train.seed);
  KP_ASSIGN_OR_RETURN(auto model, BuildModel(c.train.model, options));
  model->to(device);
  return model;
}

// Responses as a padded [N, L] id tensor and its 0/1 mask.
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


// The colocated placement's sync: the trainer's and the rollout's models
// live in one process, so the weights move by a copy per tensor (the
// resharding a hybrid engine does), measured like the c10d sync.
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

void RecordSync(const SyncStats& s, SyncMode mode, LoopStepMetrics& m) {
  m.sync_version = s.version;
  m.sync_bytes = s.bytes;
  m.sync_buckets = s.buckets;
  m.sync_s = s.seconds;
  m.sync_mode = mode == SyncMode::kLora ? "lora" : "full";
}

// A response the verifier reads: the bytes before the stop token.
std::string ResponseText(const ByteTokenizer& tok, const std::vector<std::int64_t>& ids) {
  return tok.DecodeResponse(ids);
}

// A wrong answer for the warm start's feedback examples: the answer with its
// last character changed, so the correction names the right answer.
std::string WrongAnswer(const std::string& answer, std::int64_t index) {
  std::string wrong = answer;
  char& last = wrong.back();
  if (last >= '0' && last <= '9') last = static_cast<char>('0' + (last - '0' + 1 + index % 9) % 10);
  else wrong += "x";
  return wrong;
}

// The trainer's side: the student it trains, the EMA self-teacher, the
// feedback and the optimizer.
class Actor {
 public:
  static Result<std::unique_ptr<Actor>> Create(const SdpoConfig& config, const FileSystem& fs) {
    auto a = std::unique_ptr<Actor>(new Actor(config, fs));
    KP_ASSIGN_OR_RETURN(a->device_, ParseDevice(config.train.device));
    KP_ASSIGN_OR_RETURN(a->tasks_, MakeTaskSource(fs, config.task, config.task_options));
    try {
      if (config.train.deterministic) UseDeterministicAlgorithms(a->device_);
      KP_ASSIGN_OR_RETURN(a->student_, BuildPolicy(config, a->device_));
      KP_ASSIGN_OR_RETURN(a->teacher_, BuildPolicy(config, a->device_));
      a->teacher_->eval();
      a->NewOptimizer(config.sft_lr);
    } catch (const c10::Error& e) {
      return Status::Internal(std::string("building the actor: ") + e.what_without_backtrace());
    }
    return a;
  }

  StageModelImpl& student() { return *student_; }
  const TaskSource& tasks() const { return *tasks_; }
  std::int64_t parameters() const { return CountElements(student_->parameters()); }
  std::int64_t trainable() const { return CountElements(student_->TrainableParameters()); }

  // One supervised step on the answers (see SdpoConfig::sft_steps).
  double WarmStartStep(int step) {
    std::vector<std::vector<std::int64_t>> contexts, targets;
    for (int i = 0; i < config_.sft_batch; ++i) {
      const std::int64_t index = kWarmStartTaskOffset + static_cast<std::int64_t>(step) * config_.sft_batch + i;
      const Task task = tasks_->At(index);
      contexts.push_back(tok_.EncodePrompt(WarmStartContext(task, index)));
      std::vector<std::int64_t> answer = tok_.Encode(task.answer);
      answer.push_back(ByteTokenizer::kEos);
      targets.push_back(std::move(answer));
    }
    student_->train();
    optimizer_->zero_grad();
    auto [ids, mask] = PadResponses(targets, device_);
    const torch::Tensor logp = TokenLogProbs(ResponseLogits(*student_, contexts, targets, device_), ids);
    const torch::Tensor loss = -MaskedTokenMean(logp, mask);
    loss.backward();
    torch::nn::utils::clip_grad_norm_(student_->TrainableParameters(), config_.train.grad_clip);
    optimizer_->step();
    return loss.item<double>();
  }

  // After the warm start: the teacher starts as the student, LoRA adapters
  // (if any) go onto both, and the loop's optimizer replaces the warm start's.
  void BeginLoop() {
    torch::NoGradGuard no_grad;
    auto t = teacher_->parameters();
    auto s = student_->parameters();
    for (std::size_t i = 0; i < t.size(); ++i) t[i].copy_(s[i]);
    if (config_.train.lora.enabled()) {
      student_->EnableLora(config_.train.lora, config_.train.seed);
      teacher_->EnableLora(config_.train.lora, config_.train.seed);
      student_->to(device_);
      teacher_->to(device_);
    }
    NewOptimizer(config_.train.lr);
    step_ = 0;
  }

  // One optimizer step on `batch`: feedback, teacher scoring, loss.
  Result<LoopStepMetrics> Learn(const RolloutBatch& batch) {
    try {
      return LearnOrThrow(batch);
    } catch (const c10::Error& e) {
      return Status::Internal("step " + std::to_string(step_ + 1) + ": " + e.what_without_backtrace());
    }
  }

 private:
  Actor(const SdpoConfig& c, const FileSystem& fs) : config_(c), fs_(fs) {}

  // The groups carry their own options (ParamGroups takes --lr): `lr` is
  // set on each, so the warm start really runs at --sft-lr.
  void NewOptimizer(double lr) {
    optimizer_ = std::make_unique<torch::optim::AdamW>(ParamGroups(student_->TrainableParameters(), config_.train),
                                                       torch::optim::AdamWOptions(lr));
    for (auto& group : optimizer_->param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }

  // Example `index` is in the teacher's format for a share
  // sft_context_share of the indices (alternating a correct solution and
  // the correction of a wrong answer), else the plain prompt.
  std::string WarmStartContext(const Task& task, std::int64_t index) const {
    const std::int64_t per_thousand = static_cast<std::int64_t>(config_.sft_context_share * 1000 + 0.5);
    const std::int64_t slot = (index * 617) % 1000;  // 617 is coprime to 1000: every slot once per 1000
    if (slot >= per_thousand) return task.prompt;
    if (slot % 2 == 0) return RepromptText(task.prompt, task.answer, std::nullopt, config_.reprompt.text);
    const std::string correction = Verify(task, WrongAnswer(task.answer, index)).correction;
    return RepromptText(task.prompt, std::nullopt, correction, config_.reprompt.text);
  }

  Result<LoopStepMetrics> LearnOrThrow(const RolloutBatch& batch) {
    Stopwatch step_watch;
    LoopStepMetrics m;
    m.weight_version = batch.weight_version;
    const int n_per_prompt = config_.sampling.samples;
    const auto n = static_cast<std::int64_t>(batch.samples.size());
    // Feedback and the teacher's contexts, group by group.
    Stopwatch feedback_watch;
    std::vector<std::vector<std::int64_t>> prompts, responses, teacher_contexts;
    std::vector<double> rewards;
    std::vector<float> distill_rows;
    std::int64_t response_tokens = 0;
    for (std::int64_t g = 0; g < n / n_per_prompt; ++g) {
      const Task task = tasks_->At(batch.first_task + batch.samples[g * n_per_prompt].prompt);
      std::vector<std::string> texts, corrections;
      std::vector<double> group_rewards;
      for (int j = 0; j < n_per_prompt; ++j) {
        const Sample& s = batch.samples[g * n_per_prompt + j];
        texts.push_back(ResponseText(tok_, s.response));
        const Verdict v = Verify(task, texts.back());
        group_rewards.push_back(v.reward);
        corrections.push_back(v.correction);
        prompts.push_back(tok_.EncodePrompt(task.prompt));
        responses.push_back(s.response);
        response_tokens += static_cast<std::int64_t>(s.response.size());
      }
      for (const TeacherContext& c :
           BuildTeacherContexts(tok_, task.prompt, texts, group_rewards, corrections, config_.reprompt)) {
        teacher_contexts.push_back(c.prompt_ids);
        distill_rows.push_back(c.distill ? 1.f : 0.f);
      }
      if (g == 0) m.sample_text = task.prompt + texts[0];
      rewards.insert(rewards.end(), group_rewards.begin(), group_rewards.end());
    }
    m.feedback_s = feedback_watch.Seconds();
    m.reward_mean = std::accumulate(rewards.begin(), rewards.end(), 0.0) / std::max<std::int64_t>(n, 1);
    m.response_tokens_mean = static_cast<double>(response_tokens) / std::max<std::int64_t>(n, 1);
    auto [ids, mask] = PadResponses(responses, device_);
    const torch::Tensor old_logp = OldLogProbs(batch, ids.size(1));
    const double temperature = config_.sampling.temperature;

    torch::Tensor teacher_logits;
    if (config_.loss != LossMode::kGrpo) {
      Stopwatch watch;
      torch::NoGradGuard no_grad;
      teacher_logits = ResponseLogits(*teacher_, teacher_contexts, responses, device_) / temperature;
      m.teacher_s = watch.Seconds();
    }

    Stopwatch train_watch;
    student_->train();
    m.train.lr = LearningRate(config_.train, step_);
    for (auto& group : optimizer_->param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(m.train.lr);
    optimizer_->zero_grad();
    const torch::Tensor logits = ResponseLogits(*student_, prompts, responses, device_) / temperature;
    const torch::Tensor logp = TokenLogProbs(logits, ids);
    const torch::Tensor distill_mask = mask * torch::tensor(distill_rows, torch::kFloat).to(device_).unsqueeze(1);
    torch::Tensor loss;
    switch (config_.loss) {
      case LossMode::kSdpo:
        loss = SdpoLoss(logits, teacher_logits, logp, old_logp, distill_mask, config_.distill);
        m.distill_loss = loss.item<double>();
        break;
      case LossMode::kK1Opd:
        loss = K1OpdLoss(logp, old_logp, TokenLogProbs(teacher_logits, ids), distill_mask, config_.clip);
        m.distill_loss = loss.item<double>();
        break;
      case LossMode::kGrpo: {
        const torch::Tensor adv =
            GrpoAdvantages(torch::tensor(rewards, torch::kDouble), n_per_prompt).to(torch::kFloat).to(device_);
        loss = MaskedTokenMean(ClippedPolicyLoss(logp, old_logp, adv.unsqueeze(1), config_.clip), mask);
        m.pg_loss = loss.item<double>();
        break;
      }
    }
    loss.backward();
    const auto trainable = student_->TrainableParameters();
    m.train.grad_norm = torch::nn::utils::clip_grad_norm_(trainable, config_.train.grad_clip);
    m.train.loss = loss.item<double>();
    if (!std::isfinite(m.train.loss) || !std::isfinite(m.train.grad_norm))
      return Status::Internal("step " + std::to_string(step_ + 1) +
                              ": the loss or the gradient became non-finite; lower --lr");
    optimizer_->step();
    KP_RETURN_IF_ERROR(EmaUpdate(teacher_->parameters(), student_->parameters(), config_.teacher_ema));
    m.train_s = train_watch.Seconds();
    ++step_;
    m.train.step = step_;
    m.generated_tokens = batch.stats.generated_tokens;
    m.generation_s = batch.stats.seconds;
    m.train.step_seconds = step_watch.Seconds();
    m.train.tokens_per_s = response_tokens / std::max(m.train.step_seconds, 1e-9);
    // The process's peak RSS (both models, the optimizer); not measured on CUDA yet.
    if (!device_.is_cuda()) m.train.peak_memory_bytes = PeakRssBytes(fs_);
    return m;
  }

  // The rollout's log-probabilities of its samples, padded like the ids.
  torch::Tensor OldLogProbs(const RolloutBatch& batch, std::int64_t longest) const {
    const auto n = static_cast<std::int64_t>(batch.samples.size());
    std::vector<float> v(n * longest, 0.f);
    for (std::int64_t i = 0; i < n; ++i)
      std::copy(batch.samples[i].logprobs.begin(), batch.samples[i].logprobs.end(), v.begin() + i * longest);
    return torch::tensor(v, torch::kFloat).view({n, longest}).to(device_);
  }

  SdpoConfig config_;
  const FileSystem& fs_;
  ByteTokenizer tok_;
  torch::Device device_{torch::kCPU};
  std::unique_ptr<TaskSource> tasks_;
  std::shared_ptr<StageModelImpl> student_, teacher_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  int step_ = 0;
};

// The rollout's side: its own copy of the policy, fed by the weight sync.
class Rollout {
 public:
  static Result<std::unique_ptr<Rollout>> Create(const SdpoConfig& config, const FileSystem& fs) {
    auto r = std::unique_ptr<Rollout>(new Rollout(config));
    KP_ASSIGN_OR_RETURN(r->device_, ParseDevice(config.train.device));
    KP_ASSIGN_OR_RETURN(r->tasks_, MakeTaskSource(fs, config.task, config.task_options));
    try {
      KP_ASSIGN_OR_RETURN(r->model_, BuildPolicy(config, r->device_));
      r->engine_ = std::make_unique<RolloutEngine>(r->model_);
    } catch (const c10::Error& e) {
      return Status::Internal(std::string("building the rollout: ") + e.what_without_backtrace());
    }
    return r;
  }

  StageModelImpl& model() { return *model_; }

  void BeginLoop() {
    if (!config_.train.lora.enabled()) return;
    model_->EnableLora(config_.train.lora, config_.train.seed);
    model_->to(device_);
  }

  // Samples prompts [first, first + count) of step `step`'s tasks.
  Result<RolloutBatch> Generate(int step, std::int64_t first, int count, std::int64_t version, int rank) {
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

 private:
  explicit Rollout(const SdpoConfig& c) : config_(c) {}
  SdpoConfig config_;
  ByteTokenizer tok_;
  torch::Device device_{torch::kCPU};
  std::unique_ptr<TaskSource> tasks_;
  std::shared_ptr<StageModelImpl> model_;
  std::unique_ptr<RolloutEngine> engine_;
};

SyncMode LoopSyncMode(const SdpoConfig& c) { return c.train.lora.enabled() ? SyncMode::kLora : SyncMode::kFull; }

Status WarmStart(const SdpoConfig& c, Actor& actor, LoopObserver& observer) {
  for (int s = 0; s < c.sft_steps; ++s) {
    double loss = 0;
    try {
      loss = actor.WarmStartStep(s);
    } catch (const c10::Error& e) {
      return Status::Internal(std::string("warm start: ") + e.what_without_backtrace());
    }
    if ((s + 1) % 10 == 0 || s + 1 == c.sft_steps) KP_RETURN_IF_ERROR(observer.OnWarmStart(s + 1, c.sft_steps, loss));
  }
  return Status::Ok();
}

// ---- The split placement's wire format: one batch as three tensors. ----
// header int64 [4]: samples, response tokens, weight version, forward calls;
// ints int64 [2 x samples + tokens]: (prompt, length) per sample, then ids;
// reals float64 [1 + tokens]: generation seconds, then log-probabilities.
constexpr int kTagsPerStep = 3;

Status SendBatch(Communicator& comm, const RolloutBatch& b, int step) {
  std::int64_t tokens = 0;
  for (const Sample& s : b.samples) tokens += static_cast<std::int64_t>(s.response.size());
  const auto n = static_cast<std::int64_t>(b.samples.size());
  std::vector<std::int64_t> ints;
  std::vector<double> reals = {b.stats.seconds};
  for (const Sample& s : b.samples) {
    ints.push_back(s.prompt);
    ints.push_back(static_cast<std::int64_t>(s.response.size()));
  }
  for (const Sample& s : b.samples) {
    ints.insert(ints.end(), s.response.begin(), s.response.end());
    reals.insert(reals.end(), s.logprobs.begin(), s.logprobs.end());
  }
  const int tag = step * kTagsPerStep;
  KP_RETURN_IF_ERROR(
      comm.Send(torch::tensor({n, tokens, b.weight_version, b.stats.forward_calls}, torch::kLong), 0, tag));
  KP_RETURN_IF_ERROR(comm.Send(torch::tensor(ints, torch::kLong), 0, tag + 1));
  return comm.Send(torch::tensor(reals, torch::kDouble), 0, tag + 2);
}

Result<RolloutBatch> RecvBatch(Communicator& comm, int src, int step) {
  const int tag = step * kTagsPerStep;
  torch::Tensor header = torch::zeros({4}, torch::kLong);
  KP_RETURN_IF_ERROR(comm.Recv(header, src, tag));
  const std::int64_t n = header[0].item<std::int64_t>(), tokens = header[1].item<std::int64_t>();
  torch::Tensor ints = torch::zeros({2 * n + tokens}, torch::kLong);
  torch::Tensor reals = torch::zeros({1 + tokens}, torch::kDouble);
  KP_RETURN_IF_ERROR(comm.Recv(ints, src, tag + 1));
  KP_RETURN_IF_ERROR(comm.Recv(reals, src, tag + 2));
  RolloutBatch b;
  b.weight_version = header[2].item<std::int64_t>();
  b.stats.forward_calls = header[3].item<std::int64_t>();
  b.stats.generated_tokens = tokens;
  const auto* iv = ints.data_ptr<std::int64_t>();
  const auto* rv = reals.data_ptr<double>();
  b.stats.seconds = rv[0];
  std::int64_t at = 2 * n, lp = 1;
  for (std::int64_t i = 0; i < n; ++i) {
    Sample s;
    s.prompt = static_cast<int>(iv[2 * i]);
    const std::int64_t len = iv[2 * i + 1];
    s.response.assign(iv + at, iv + at + len);
    s.logprobs.assign(rv + lp, rv + lp + len);
    s.stopped = len > 0 && s.response.back() == ByteTokenizer::kEos;
    at += len;
    lp += len;
    b.samples.push_back(std::move(s));
  }
  return b;
}

// Gathers step `step`'s batch from every rollout rank, in rank order.
Result<RolloutBatch> GatherBatch(Communicator& comm, const SdpoConfig& c, int step) {
  RolloutBatch all;
  all.first_task = FirstTask(c, step);
  const int per_rank = c.prompts / c.rollout_ranks;
  for (int r = 1; r <= c.rollout_ranks; ++r) {
    Result<RolloutBatch> part = RecvBatch(comm, r, step);
    if (!part.ok())
      return Status::IoError("rollout rank " + std::to_string(r) + " fell behind or died: no batch for step " +
                             std::to_string(step) + ": " + part.status().message());
    all.weight_version = part->weight_version;
    all.stats.seconds = std::max(all.stats.seconds, part->stats.seconds);
    all.stats.generated_tokens += part->stats.generated_tokens;
    all.stats.forward_calls += part->stats.forward_calls;
    for (Sample& s : part.value().samples) {
      s.prompt += (r - 1) * per_rank;
      all.samples.push_back(std::move(s));
    }
  }
  return all;
}

WeightSyncOptions SyncOptions(const SdpoConfig& c, SyncMode mode) {
  WeightSyncOptions o;
  o.mode = mode;
  o.bucket_bytes = c.sync_bucket_bytes;
  o.root = 0;
  return o;
}

Status RunSplitTrainer(const SdpoConfig& c, Communicator& world, const FileSystem& fs, LoopObserver& observer) {
  KP_ASSIGN_OR_RETURN(auto actor, Actor::Create(c, fs));
  KP_RETURN_IF_ERROR(observer.OnStart(actor->parameters(), actor->trainable(), actor->tasks().Describe()));
  KP_RETURN_IF_ERROR(WarmStart(c, *actor, observer));
  // The rollout starts from the warm-started weights: always a full sync.
  LoopStepMetrics initial;
  KP_ASSIGN_OR_RETURN(SyncStats first, SendWeights(world, SyncedTensors(actor->student(), SyncMode::kFull), 0,
                                                   SyncOptions(c, SyncMode::kFull)));
  RecordSync(first, SyncMode::kFull, initial);
  KP_RETURN_IF_ERROR(observer.OnInitialSync(initial));
  actor->BeginLoop();
  const SyncMode mode = LoopSyncMode(c);
  // Batch s + 1 is received before the weights of step s go out: the rollout
  // sent it before it waits for them, and c10d's Gloo finishes a rank's
  // outstanding sends before its next collective.
  Stopwatch first_wait;
  KP_ASSIGN_OR_RETURN(RolloutBatch batch, GatherBatch(world, c, 1));
  double waited = first_wait.Seconds();
  for (int step = 1; step <= c.train.steps; ++step) {
    Stopwatch cycle;
    KP_ASSIGN_OR_RETURN(LoopStepMetrics m, actor->Learn(batch));
    m.wait_s = waited;
    if (step < c.train.steps) {
      Stopwatch wait;
      KP_ASSIGN_OR_RETURN(batch, GatherBatch(world, c, step + 1));
      waited = wait.Seconds();
    }
    // Batch s + 2 is the next to need these weights (one step off-policy).
    if (step + 2 <= c.train.steps) {
      KP_ASSIGN_OR_RETURN(SyncStats s,
                          SendWeights(world, SyncedTensors(actor->student(), mode), step, SyncOptions(c, mode)));
      RecordSync(s, mode, m);
    }
    m.train.step_seconds = cycle.Seconds() + m.wait_s;
    KP_RETURN_IF_ERROR(observer.OnStep(m));
  }
  return world.Barrier();
}

Status RunSplitRollout(const SdpoConfig& c, Communicator& world, const FileSystem& fs) {
  KP_ASSIGN_OR_RETURN(auto rollout, Rollout::Create(c, fs));
  KP_RETURN_IF_ERROR(ReceiveWeights(world, SyncedTensors(rollout->model(), SyncMode::kFull), 0,
                                    SyncOptions(c, SyncMode::kFull))
                         .status());
  rollout->BeginLoop();
  const SyncMode mode = LoopSyncMode(c);
  const int per_rank = c.prompts / c.rollout_ranks;
  const int rank = world.rank();
  std::int64_t version = 0;
  for (int step = 1; step <= c.train.steps; ++step) {
    if (step >= 3) {
      // Batch s needs the weights of step s - 2 or newer; older ones are refused.
      KP_ASSIGN_OR_RETURN(SyncStats s,
                          ReceiveWeights(world, SyncedTensors(rollout->model(), mode), step - 2, SyncOptions(c, mode)));
      version = s.version;
    }
    KP_ASSIGN_OR_RETURN(RolloutBatch b,
                        rollout->Generate(step, FirstTask(c, step) + (rank - 1) * per_rank, per_rank, version, rank));
    KP_RETURN_IF_ERROR(SendBatch(world, b, step));
  }
  return world.Barrier();
}

}  // namespace

Status RunColocatedLoop(const SdpoConfig& config, const FileSystem& fs, LoopObserver& observer) {
  KP_RETURN_IF_ERROR(ValidateSdpoConfig(config));
  KP_ASSIGN_OR_RETURN(auto actor, Actor::Create(config, fs));
  KP_ASSIGN_OR_RETURN(auto rollout, Rollout::Create(config, fs));
  KP_RETURN_IF_ERROR(observer.OnStart(actor->parameters(), actor->trainable(), actor->tasks().Describe()));
  KP_RETURN_IF_ERROR(WarmStart(config, *actor, observer));
  LoopStepMetrics initial;
  RecordSync(CopyWeights(SyncedTensors(actor->student(), SyncMode::kFull),
                         SyncedTensors(rollout->model(), SyncMode::kFull), 0),
             SyncMode::kFull, initial);
  KP_RETURN_IF_ERROR(observer.OnInitialSync(initial));
  actor->BeginLoop();
  rollout->BeginLoop();
  const SyncMode mode = LoopSyncMode(config);
  for (int step = 1; step <= config.train.steps; ++step) {
    Stopwatch watch;
    KP_ASSIGN_OR_RETURN(RolloutBatch batch,
                        rollout->Generate(step, FirstTask(config, step), config.prompts, step - 1, 0));
    KP_ASSIGN_OR_RETURN(LoopStepMetrics m, actor->Learn(batch));
    if (step < config.train.steps)
      RecordSync(CopyWeights(SyncedTensors(actor->student(), mode), SyncedTensors(rollout->model(), mode), step),
                 mode, m);
    m.train.step_seconds = watch.Seconds();
    KP_RETURN_IF_ERROR(observer.OnStep(m));
  }
  return Status::Ok();
}

Status RunSplitLoopRank(const SdpoConfig& config, const Rendezvous& rendezvous, const C10dOptions& c10d,
                        const FileSystem& fs, LoopObserver& observer) {
  KP_RETURN_IF_ERROR(ValidateSdpoConfig(config));
  if (rendezvous.world_size != 1 + config.rollout_ranks)
    return Status::InvalidArgument("--rollout-ranks: the split loop needs 1 trainer rank + " +
                                   std::to_string(config.rollout_ranks) + " rollout ranks, but WORLD_SIZE is " +
                                   std::to_string(rendezvous.world_size));
  KP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> world, ConnectC10d(rendezvous, c10d));
  if (world->rank() == 0) return RunSplitTrainer(config, *world, fs, observer);
  return RunSplitRollout(config, *world, fs);
}

}  // namespace kp::runtime
