// The SDPO loop of `kimi-plan sdpo`: the five systems of seed 000 run for
// real. The rollout samples responses from its copy of the policy
// (runtime/rollout.h), the feedback scores them (runtime/tasks.h), the
// self-teacher (an EMA of the student, runtime/sdpo_loss.h) scores the same
// tokens after the reprompt (runtime/reprompt.h), the actor trains on the
// chosen loss, and the weight sync (runtime/weight_sync.h) brings the new
// weights to the rollout. docs/sdpo.md has the formulas and the loop.
//
// The actor is the pipeline trainer of runtime/pipeline_runtime.h with the
// loop's loss at its last stage.
//
// Placements:
//  - colocated: one process (a pipeline of one rank, the teacher and the
//    rollout beside it); the rollout samples with the weights of the step
//    before (on-policy), the syncs are local copies;
//  - split: processes over c10d (SplitRanks): the actor's pipeline on ranks
//    0 .. pp - 1, the self-teacher on rank pp (not for GRPO, which has none),
//    then the rollout ranks. One step off-policy, as the simulator's split
//    placement: batch s is sampled with the weights of step s - 2 while the
//    actor trains step s - 1; the rollout refuses weights older than that
//    (the sync's version check). Rank 0 gathers the rollouts' batches and
//    broadcasts each to the actor and the teacher; the teacher broadcasts
//    its logits back; after a step every pipeline rank syncs the tensors of
//    its own stages, to the teacher (which updates its EMA) and to the
//    rollouts.
// Step s (1-based) uses tasks [(s - 1) P, s P) of the task source, P prompts
// per step; a rank with R rollout ranks samples its P / R of them.
// No LibTorch in this header: the CLI includes it.
// Thread-safety: one thread per rank.
#ifndef KIMI_PLAN_RUNTIME_SDPO_SDPO_LOOP_H_
#define KIMI_PLAN_RUNTIME_SDPO_SDPO_LOOP_H_

#include <cstdint>
#include <optional>
#include <string>

#include "common/file_system.h"
#include "common/status.h"
#include "runtime/comm/rendezvous.h"
#include "runtime/tasks/reprompt.h"
#include "runtime/sdpo/sampling_options.h"
#include "runtime/sdpo/sdpo_options.h"
#include "runtime/tasks/tasks.h"
#include "runtime/train/trainer.h"

namespace kp::runtime {

enum class LossMode {
  kSdpo,   ///< top-k self-distillation from the reprompted teacher (§6)
  kGrpo,   ///< GRPO outcome advantages with the clipped policy gradient (§7)
  kK1Opd,  ///< Verl's on-policy distillation with the k1 policy-gradient loss (§8)
};
/// "sdpo", "grpo", "k1-opd"; InvalidArgument naming --loss otherwise.
Result<LossMode> ParseLossMode(std::string_view name);
const char* LossModeName(LossMode m);

enum class Placement { kColocated, kSplit };
/// "colocated", "split"; InvalidArgument naming --placement otherwise.
Result<Placement> ParsePlacement(std::string_view name);
const char* PlacementName(Placement p);

/// The reprompt templates: the reference's (docs/sdpo.md §2), or a compact
/// variant with the same structure and ~100 fewer bytes per context, for
/// byte-level models on a CPU.
/// "reference", "compact"; InvalidArgument naming --reprompt otherwise.
Result<RepromptTemplate> ParseRepromptTemplate(std::string_view name);

struct SdpoConfig {
  /// The actor: model, options, LoRA, optimizer and schedule (lr, warmup,
  /// steps, grad_clip, weight decay), seed, device. batch/seq_len/data are
  /// unused: the loop's batch is `prompts` x `sampling.samples` responses.
  TrainConfig train;
  std::string task = "arithmetic";  ///< a built-in family or a JSON Lines task file
  BuiltinTaskOptions task_options;
  int prompts = 8;                  ///< prompts per step
  /// The loop's context in tokens: the longest teacher context (a reprompted
  /// prompt with a demonstration and feedback) plus a response that the loop
  /// may build (--max-context). A task file whose prompts exceed it is
  /// refused before any step (CheckTaskContexts).
  int max_context = 4096;
  SamplingOptions sampling;         ///< samples = the GRPO/SDPO group size
  LossMode loss = LossMode::kSdpo;
  DistillOptions distill;
  PolicyClip clip;
  RepromptOptions reprompt;
  double teacher_ema = 0.05;        ///< teacher <- (1 - rate) teacher + rate student after each step
  /// Supervised warm start on the task's answers before step 1: the
  /// runtime's models start from random weights, where a verifier's reward
  /// is 0 for every sample; a short SFT makes a small "pretrained" policy.
  /// A share `sft_context_share` of its examples put the answer in the
  /// teacher's context format (a correct solution or the correction), so
  /// the model learns to use feedback as a pretrained LLM does. 0: none.
  int sft_steps = 0;
  double sft_context_share = 0.5;
  int sft_batch = 32;
  double sft_lr = 1e-3;             ///< the warm start's constant learning rate
  Placement placement = Placement::kColocated;
  int rollout_ranks = 1;            ///< split: the rollout ranks (SplitRanks)
  /// The actor's pipeline (split; colocated is one rank): --pp ranks,
  /// --vp stages per rank, --microbatches, --schedule, --attnres-cache.
  struct ActorPipeline {
    int pp = 1;
    int vp = 1;
    int microbatches = 1;
    std::string schedule = "1f1b";
    bool attnres_cache = false;
  } actor;
  std::int64_t sync_bucket_bytes = 16ll << 20;
  /// --rollout-experts int4: the rollouts serve the routed experts as
  /// released INT4 (weights/int4.h, as K2.6's rollouts do); the actor
  /// quantises them for every full sync.
  bool rollout_int4_experts = false;
};

/// The split placement's ranks, in world order.
struct SplitRanks {
  int actor = 1;         ///< ranks 0 .. actor - 1: the pipeline
  int teacher = -1;      ///< the teacher's rank; -1: none (GRPO)
  int first_rollout = 1;
  int world = 2;
};
SplitRanks SplitRanksOf(const SdpoConfig& c);

/// Checks every field; the message names the flag.
Status ValidateSdpoConfig(const SdpoConfig& c);

/// For a task file: every task's longest teacher context (its prompt
/// reprompted with a demonstration and a correction of max_new_tokens bytes
/// each) plus a response fits `max_context`; InvalidArgument "--task FILE:
/// task N: ..." naming --max-context otherwise. Built-in tasks always fit.
Status CheckTaskContexts(const SdpoConfig& c, const FileSystem& fs);
/// The whole configuration as JSON: what the `runs` table records and
/// `kimi-plan sdpo --print-config` prints.
std::string SdpoConfigJson(const SdpoConfig& c);
/// The configuration SdpoConfigJson wrote, read back strictly (an unknown
/// or missing field is refused, named "config.<field>"), the model from
/// `catalog` (ReadTrainConfig), then validated as the command validates it.
/// What the benchmarks run: SdpoConfigJson(SdpoConfigFromJson(j)) is j.
Result<SdpoConfig> SdpoConfigFromJson(const std::string& json, const PresetCatalog& catalog);

/// What one step of the loop measured (one `steps` + `loop_steps` row).
struct LoopStepMetrics {
  StepMetrics train;                   ///< loss = the step's training loss
  std::int64_t weight_version = 0;     ///< the weights the batch was sampled with
  double reward_mean = 0;
  std::optional<double> distill_loss;  ///< sdpo, k1-opd
  std::optional<double> pg_loss;       ///< grpo
  double response_tokens_mean = 0;
  std::int64_t generated_tokens = 0;
  double generation_s = 0;             ///< the slowest rollout rank's sampling time
  double feedback_s = 0;               ///< the verifier and the teacher's contexts
  double teacher_s = 0;
  double train_s = 0;
  double wait_s = 0;                   ///< the trainer waiting for the batch
  // The sync after the step; sync_version < 0 when none was made.
  std::int64_t sync_version = -1;
  std::int64_t sync_bytes = 0;
  int sync_buckets = 0;
  double sync_s = 0;
  std::string sync_mode;               ///< "full" or "lora"
  std::string sample_text;             ///< one prompt and response, for the progress line
};

/// Where the loop reports (the CLI writes the store and prints progress).
/// An error it returns stops the loop.
class LoopObserver {
 public:
  virtual ~LoopObserver() = default;
  /// The sizes of the models, before anything runs.
  virtual Status OnStart(std::int64_t parameters, std::int64_t trainable, const std::string& task) = 0;
  /// Every tenth warm-start step and the last.
  virtual Status OnWarmStart(int step, int steps, double loss) = 0;
  /// The initial sync (version 0), before step 1.
  virtual Status OnInitialSync(const LoopStepMetrics& sync) = 0;
  virtual Status OnStep(const LoopStepMetrics& m) = 0;
};

/// The colocated loop in this process: warm start, then config.train.steps
/// steps.
Status RunColocatedLoop(const SdpoConfig& config, const FileSystem& fs, LoopObserver& observer);

/// One rank of the split loop (world = SplitRanksOf(config).world): rank 0
/// reports to `observer`; the others report nothing. --device cuda puts
/// each rank on cuda:LOCAL_RANK. A rank that dies or a
/// rollout that falls behind past c10d.timeout_s ends every rank with an
/// error naming it.
Status RunSplitLoopRank(const SdpoConfig& config, const Rendezvous& rendezvous, const C10dOptions& c10d,
                        const FileSystem& fs, LoopObserver& observer);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_SDPO_SDPO_LOOP_H_
