// The pieces of the SDPO loop (sdpo_loop.h) that its two placements share
// (sdpo_loop.cc: colocated, sdpo_split.cc: split) and its tests reach: how a
// rollout batch becomes feedback, the teacher's contexts and the loss over
// response tokens, and the actor, teacher and rollout of the loop. Not part
// of the CLI's view (sdpo_loop.h has no LibTorch).
//
// The actor is always the pipeline trainer of runtime/pipeline_runtime.h: in
// the colocated placement a pipeline of one rank, in the split placement
// ranks 0 .. pp - 1. Its loss is a ResponseObjective: per-token terms of the
// response logits and the tokens the mean runs over, so the same objective
// is a token-mean over the whole batch (a single process) or a sum of
// micro-batch shares at the last stage (PipelineObjective).
// Thread-safety: one thread per object.
#ifndef KIMI_PLAN_RUNTIME_SDPO_SDPO_LOOP_INTERNAL_H_
#define KIMI_PLAN_RUNTIME_SDPO_SDPO_LOOP_INTERNAL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "runtime/model/model.h"
#include "runtime/train/pipeline_runtime.h"
#include "runtime/train/pipeline_stage.h"
#include "runtime/sdpo/rollout.h"
#include "runtime/sdpo/sdpo_loop.h"
#include "runtime/sdpo/weight_sync.h"
#include "specs/stage_split.h"

namespace kp::runtime {

/// Rows context_i ++ response_i without its last token, right-padded with PAD
/// to the longest: `input` [N, W] int64; `where` [N, L] the position in the
/// row that predicts response_i[t] (L the longest response; positions past a
/// row's response repeat its last and are masked by callers).
struct ResponseRows {
  torch::Tensor input;
  torch::Tensor where;
};
ResponseRows MakeResponseRows(const std::vector<std::vector<std::int64_t>>& contexts,
                              const std::vector<std::vector<std::int64_t>>& responses, torch::Device device);

/// logits [N, W, V] -> the rows' response logits [N, L, V] at `where`, with
/// ids >= ByteTokenizer::kVocabSize at -inf, as the rollout never samples them.
torch::Tensor PickResponseLogits(const torch::Tensor& logits, const torch::Tensor& where);

/// PickResponseLogits of the model's forward over MakeResponseRows: [N, L, V] fp32.
torch::Tensor ResponseLogits(StageModelImpl& model, const std::vector<std::vector<std::int64_t>>& contexts,
                             const std::vector<std::vector<std::int64_t>>& responses, torch::Device device);

/// log_softmax(logits)[ids] over the last dimension: logits [..., V], ids [...].
torch::Tensor TokenLogProbs(const torch::Tensor& logits, const torch::Tensor& ids);

/// Responses as a padded [N, L] id tensor and its 0/1 float mask.
std::pair<torch::Tensor, torch::Tensor> PadResponses(const std::vector<std::vector<std::int64_t>>& responses,
                                                     torch::Device device);

/// What a rollout returns for one step: samples of prompts
/// [first_task, first_task + prompts) of the task source.
struct RolloutBatch {
  std::int64_t first_task = 0;
  std::int64_t weight_version = 0;
  std::vector<Sample> samples;  ///< Sample::prompt relative to first_task
  GenerationStats stats;
};

/// The feedback on a batch: every sample verified, the teacher's context of
/// each (the reprompt with feedback or a successful sibling). Deterministic
/// given the batch, so every rank that needs it computes it.
struct Feedback {
  std::vector<std::vector<std::int64_t>> prompts, responses, teacher_contexts;
  std::vector<double> rewards;
  std::vector<float> distill_rows;  ///< 1: the response takes part in the distillation
  std::int64_t response_tokens = 0;
  std::string sample_text;          ///< the first prompt and its first response
  double reward_mean = 0;
  double seconds = 0;
};
Feedback RunFeedback(const SdpoConfig& c, const TaskSource& tasks, const RolloutBatch& batch);

/// A loss over response tokens: `terms(logits, first, rows)` are the
/// per-token terms [rows, L] of rows [first, first + rows) given their
/// response logits [rows, L, V]; the loss is the token-mean of the terms
/// over `mask` [N, L] of the whole batch.
struct ResponseObjective {
  torch::Tensor mask;
  std::function<torch::Tensor(const torch::Tensor& logits, std::int64_t first, std::int64_t rows)> terms;
};

/// The warm start's objective: the negative log-likelihood of the answers
/// `ids` where `mask` is 1.
ResponseObjective WarmStartObjective(const torch::Tensor& ids, const torch::Tensor& mask);

/// The loop's loss (SdpoConfig::loss) on a batch: the logits are divided by
/// the sampling temperature inside; `teacher_logits` [N, L, V] (already
/// divided) is undefined for GRPO.
ResponseObjective LoopObjective(const SdpoConfig& c, const Feedback& feedback, const RolloutBatch& batch,
                                const torch::Tensor& teacher_logits, torch::Device device);

/// The pipeline's view of an objective: micro-batch m's share is the sum of
/// its rows' masked terms over the whole batch's token count, so the shares
/// add up to the token-mean (pipeline_stage.h, MicroBatchLoss).
class PipelineObjective : public MicroBatchLoss {
 public:
  PipelineObjective(ResponseObjective objective, torch::Tensor where, int microbatches);
  torch::Tensor Share(const torch::Tensor& logits, int m) override;

 private:
  ResponseObjective objective_;
  torch::Tensor where_;
  int microbatches_;
  torch::Tensor tokens_;  // the batch's token count, at least 1
};

/// The builder of every copy of the policy (actor stages, teacher, rollout):
/// the same seed gives the same initial weights everywhere.
Result<std::shared_ptr<StageModelImpl>> BuildPolicy(const SdpoConfig& c, torch::Device device);

/// The actor: one rank of the pipeline trainer (runtime/pipeline_runtime.h)
/// that trains the student on the loop's objective. Collective over the
/// pipeline group: every rank calls the same methods in the same order.
class ActorRank {
 public:
  static Result<std::unique_ptr<ActorRank>> Create(const SdpoConfig& c, Communicator& pipeline,
                                                   const FileSystem& fs);
  /// The supervised warm start (SdpoConfig::sft_steps), reported every
  /// tenth step. With `heartbeat` (the split placement's world) a 1 is
  /// broadcast from rank 0 before the first step and after every step, and
  /// a 0 at the end, for the ranks that wait meanwhile (AwaitWarmStart): a
  /// warm start longer than the c10d timeout then never times them out,
  /// and a dead actor still does.
  Status WarmStart(LoopObserver& observer, Communicator* heartbeat = nullptr);
  /// After the warm start: LoRA adapters (if any) and the loop's optimizer.
  Status BeginLoop();
  /// One optimizer step on `batch`; the metrics' train part and losses are
  /// filled (the same on every rank), the rest is the caller's.
  Result<LoopStepMetrics> Learn(const RolloutBatch& batch, const Feedback& feedback,
                                const torch::Tensor& teacher_logits);
  /// This rank's tensors that a sync moves, its stages in order; with
  /// `int4_experts`, a full sync's experts as an INT4 rollout holds them
  /// (SyncedTensors).
  std::vector<NamedTensor> Synced(SyncMode mode, bool int4_experts = false);
  /// The whole model's parameters and trainable ones (summed over the pipeline).
  Result<std::pair<std::int64_t, std::int64_t>> CountParameters();
  const TaskSource& tasks() const { return *tasks_; }
  torch::Device device() const { return device_; }

 private:
  ActorRank(const SdpoConfig& c, Communicator& pipeline, const FileSystem& fs) : config_(c), pipeline_(pipeline), fs_(fs) {}
  Result<double> WarmStartStep(int step);
  Result<PipelineStepResult> TrainOn(const std::vector<std::vector<std::int64_t>>& contexts,
                                     const std::vector<std::vector<std::int64_t>>& responses,
                                     const ResponseObjective& objective);
  std::string WarmStartContext(const Task& task, std::int64_t index) const;

  SdpoConfig config_;
  Communicator& pipeline_;
  const FileSystem& fs_;
  ByteTokenizer tok_;
  torch::Device device_{torch::kCPU};
  std::unique_ptr<TaskSource> tasks_;
  std::unique_ptr<PipelineRank> rank_;
};

/// The self-teacher: a whole model under an EMA of the student's weights
/// (SdpoConfig::teacher_ema), scoring responses after the reprompt.
class Teacher {
 public:
  static Result<std::unique_ptr<Teacher>> Create(const SdpoConfig& c);
  /// Its tensors a sync moves (the student's names and order, whole model).
  std::vector<NamedTensor> Synced(SyncMode mode);
  /// The initial weights: the warm-started student's, copied.
  Status Assign(const std::vector<NamedTensor>& student);
  /// teacher <- (1 - rate) teacher + rate student over the synced tensors.
  Status Update(const std::vector<NamedTensor>& student);
  /// After the warm start: the same LoRA adapters as the student's.
  void BeginLoop();
  /// The teacher's logits of every response after its teacher context,
  /// divided by the temperature: [N, L, V].
  torch::Tensor Score(const Feedback& feedback);

 private:
  explicit Teacher(const SdpoConfig& c) : config_(c) {}
  SdpoConfig config_;
  torch::Device device_{torch::kCPU};
  std::shared_ptr<StageModelImpl> model_;
};

/// The rollout: its own copy of the policy, fed by the weight sync; with
/// --rollout-experts int4 its routed experts are INT4 as released
/// (QuantizeExpertBase at creation), and its syncs receive them so.
class Rollout {
 public:
  static Result<std::unique_ptr<Rollout>> Create(const SdpoConfig& c, const FileSystem& fs);
  std::vector<NamedTensor> Synced(SyncMode mode);
  void BeginLoop();
  /// Samples prompts [first, first + count) of step `step`'s tasks; `rank`
  /// (the rollout's index, 0 for the first) varies the sampling seed.
  Result<RolloutBatch> Generate(int step, std::int64_t first, int count, std::int64_t version, int rank);

 private:
  explicit Rollout(const SdpoConfig& c) : config_(c) {}
  SdpoConfig config_;
  ByteTokenizer tok_;
  torch::Device device_{torch::kCPU};
  std::unique_ptr<TaskSource> tasks_;
  std::shared_ptr<StageModelImpl> model_;
  std::unique_ptr<RolloutEngine> engine_;
};

/// The other side of ActorRank::WarmStart's heartbeat: returns at its 0.
Status AwaitWarmStart(Communicator& heartbeat, torch::Device device);

/// The actor pipeline's stages as PipelineRank makes them: the rank that
/// holds each (the schedule's stage_to_rank) and the layers of each
/// (EvenSplit). Errors name --schedule, --microbatches or --pp.
struct ActorStages {
  std::vector<int> stage_to_rank;
  StageSplit split;
};
Result<ActorStages> ActorStagesOf(const SdpoConfig& c);

/// A step's metrics from its batch: reward, response lengths, the sample
/// text, the feedback's, teacher's and rollout's times and tokens, and the
/// step's wall time with its trained tokens per second.
void RecordBatch(const RolloutBatch& batch, const Feedback& feedback, double teacher_s, double step_seconds,
                 LoopStepMetrics& m);

/// The sync mode of the loop's steps (the initial sync is always full).
SyncMode LoopSyncMode(const SdpoConfig& c);
/// The tasks of step `step` (1-based) start here.
std::int64_t FirstTask(const SdpoConfig& c, int step);
/// Copies the metrics of a sync into a step's.
void RecordSync(const SyncStats& s, SyncMode mode, LoopStepMetrics& m);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_SDPO_SDPO_LOOP_INTERNAL_H_
