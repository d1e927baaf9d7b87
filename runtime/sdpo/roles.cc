// The loop's three roles, whatever the placement: the actor (a pipeline
// rank that warm-starts, then learns from batches), the teacher (an EMA of
// the actor that scores feedback) and the rollout (samples responses).
#include "runtime/sdpo/sdpo_loop.h"

#include <algorithm>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "common/clock.h"
#include "runtime/comm/device.h"
#include "runtime/model/model.h"
#include "runtime/sdpo/rollout.h"
#include "runtime/sdpo/sdpo_loop_internal.h"
#include "runtime/sdpo/sdpo_loss.h"
#include "runtime/sdpo/weight_sync.h"
#include "specs/schedule_kind.h"

namespace kp::runtime {

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
  // A first beat before the first step: the waiting ranks' timeout then
  // covers the actor's set-up alone, not set-up plus a step.
  if (heartbeat != nullptr && config_.sft_steps > 0) KP_RETURN_IF_ERROR(Beat(*heartbeat, device_, true));
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
  // The process's peak: the stages, the optimizer, the step's activations.
  m.train.peak_memory_bytes = PeakMemoryBytes(device_, fs_);
  return m;
}

std::vector<NamedTensor> ActorRank::Synced(SyncMode mode, bool int4_experts) {
  std::vector<NamedTensor> out;
  for (int s : rank_->stages()) {
    StageModelImpl* model = ModelOfStage(rank_->stage_module(s));
    if (model == nullptr) continue;
    for (NamedTensor& t : SyncedTensors(*model, mode, int4_experts)) out.push_back(std::move(t));
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
    // The widths were checked with the configuration (ValidateSdpoConfig).
    if (c.rollout_int4_experts) KP_RETURN_IF_ERROR(r->model_->QuantizeExpertBase());
    r->engine_ = std::make_unique<RolloutEngine>(r->model_);
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("building the rollout: ") + e.what_without_backtrace());
  }
  return r;
}

std::vector<NamedTensor> Rollout::Synced(SyncMode mode) {
  return SyncedTensors(*model_, mode, config_.rollout_int4_experts);
}

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

}  // namespace kp::runtime
