// One rank of a pipeline-parallel training run: it holds the stages the
// schedule places on it, executes its lowered action list (F, I/B, W,
// SEND_F/RECV_F/SEND_B/RECV_B) every step, and moves the hidden state plus
// the Block Attention Residual payload of torchtitan PR #4312 over the
// pipeline communicator: the whole stack on every hop (naive) or, with the
// rank cache, only what the receiving rank lacks (cached). What is sent,
// stored, deposited and collected is read off schedules/attnres_transport.h's
// routing tables, so what the simulator predicts is what runs.
//
// Numerics: a step is the single-process reference that accumulates the
// micro-batches (loss_m / M, backward per micro-batch, in micro-batch order)
// followed by the trainer's AdamW and clipping; the total gradient norm is a
// fixed-order fp64 sum over the whole model's parameters (see
// pipeline_stage.h, GradNormSquared), reduced across ranks exactly. Cache
// off, and cache on with one stage per rank, the gradients are bitwise those
// of the reference; cache on with several stages per rank a stored block's
// gradient sums the same contributions in another association
// (docs/runtime.md, "Pipeline").
//
// Composed with data and expert parallelism (`replicas`, train_session.h
// states the layout): every DP replica runs the same action lists on its
// rows of the step's batch; after the last backward the gradients of this
// rank's stages are averaged over the stage's DP group (experts over their
// expert-DP group) before the norm, the clip and AdamW; the loss is the mean
// over the replicas. With EP the routed experts of each stage are sharded
// over the EP group and the tokens of a micro-batch are exchanged among the
// replicas of the same stage, which run the same actions in the same order.
// A step is then bitwise the reference that accumulates each replica's
// micro-batches apart and averages the replicas in DP-rank order.
//
// Device: stages, received buffers, tokens and the reductions' tensors live
// on train.device (cuda:N under NCCL, which moves device memory only).
//
// W in zero-bubble schedules: the weight gradient is computed together with
// the input gradient at I (one autograd pass); W is a no-op. The schedule's
// order is kept, only W's time moves into I.
//
// A step runs in three parts, each with one job: the schedule executor
// (schedule_executor.h: the actions and transfers), the gradient reducer
// (gradient_reducer.h: TP partial sums, the replicas' averages, the norm
// and the loss) and the optimizer step (optimizer_step.h: clip, AdamW, the
// shards), over one shared context (pipeline_context.h).
//
// No LibTorch in this header: the CLI includes it. pipeline_stage.h has the
// tensor-level pieces (stage modules, the reference helpers).
// Thread-safety: a PipelineRank is used from one thread; each rank of a run
// has its own PipelineRank and communicator.
#ifndef KIMI_PLAN_RUNTIME_TRAIN_PIPELINE_RUNTIME_H_
#define KIMI_PLAN_RUNTIME_TRAIN_PIPELINE_RUNTIME_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/train/trainer.h"
#include "specs/schedule_kind.h"
#include "specs/stage_split.h"
#include "common/file_system.h"
#include "weights/checkpoint_dir.h"
#include "weights/sharded_save.h"

namespace torch::serialize {
class InputArchive;
class OutputArchive;
}  // namespace torch::serialize

namespace kp::runtime {

class Communicator;
class MicroBatchLoss;
struct ExecutorFaults;
struct RankGroups;
class PipelineStageModule;

/// The groups this rank's stages are replicated or split over; a null group
/// is a group of one. The communicators must outlive the PipelineRank.
struct PipelineReplicas {
  Communicator* dp = nullptr;         ///< this rank's stages on every DP replica: dense gradients averaged here
  Communicator* expert_dp = nullptr;  ///< with experts split: the ranks holding this rank's expert shards
  Communicator* ep = nullptr;   ///< the routed experts of each MoE layer split over it (tokens all-to-all)
  Communicator* etp = nullptr;  ///< each expert's FFN split over it (expert_parallel.h)
  Communicator* expert_shards = nullptr;  ///< the ep x etp block (rank_groups.h): a bank's shards' squares summed
  /// Each model stage split over it (tensor_parallel.h: heads, FFN hidden
  /// units, vocabulary); every rank of it runs the same actions on the same
  /// rows. Not with LoRA or a step's own loss yet.
  Communicator* tp = nullptr;
  /// With tp: the residual stream, and what stages send each other, split
  /// along the sequence (T / tp tokens per rank).
  bool sequence_parallel = false;
  /// Each sequence split over it (context_parallel.h): this rank holds T / cp
  /// of every row's tokens; the dense gradients are averaged over dp_cp.
  Communicator* cp = nullptr;
  Communicator* dp_cp = nullptr;  ///< with cp: this stage's DP x CP ranks
};

/// The replicas of a rank's stages from its layout's groups (rank_groups.h).
PipelineReplicas ReplicasOf(const RankGroups& groups, bool sequence_parallel);

struct PipelineRankConfig {
  /// Model, options, optimizer hyper-parameters, batch (sequences per step,
  /// over all DP replicas), seq_len, seed and device; `data` and `resume`
  /// are not read here (the caller hands each step's tokens).
  TrainConfig train;
  ScheduleKind schedule = ScheduleKind::k1F1B;
  int pp = 1;
  int vp = 1;                ///< stages per rank (interleaved-1f1b; 2 for the V-shaped ones)
  int microbatches = 1;      ///< M per replica; must divide train.batch / dp
  PipelineReplicas replicas; ///< DP / EP composition; none by default
  bool attnres_cache = true; ///< --attnres-cache on|off
  /// The stage split; empty: EvenSplit(layers, stages) as the simulator does.
  /// With train.lora enabled every model stage starts with its adapters
  /// and only they train.
  StageSplit split;
};

/// Entries and bytes one rank sent for one stage and direction in a step.
struct PipelineTraffic {
  int stage = 0;               ///< the sending stage
  bool forward = true;         ///< forward: stage -> stage + 1; backward: stage -> stage - 1
  std::int64_t messages = 0;   ///< one per micro-batch
  std::int64_t entries = 0;    ///< block-stack entries (or their gradients), summed over micro-batches
  std::int64_t entry_bytes = 0;
  std::int64_t hidden_bytes = 0;  ///< the hidden state (or its gradient), which travels on every hop
};

struct PipelineStepResult {
  int step = 0;           ///< 1-based, as StepMetrics::step
  double loss = 0;        ///< mean over replicas of (sum of micro-batch mean losses) / M, the same on every rank
  double grad_norm = 0;   ///< total L2 norm (after the DP average) before clipping, the same on every rank
  double lr = 0;
  double step_seconds = 0;
  /// This rank's sends over other ranks (local hops inside a rank are not
  /// traffic), by stage then direction.
  std::vector<PipelineTraffic> traffic;
};

/// Makes the module of one stage; the default builds StageModelImpl pieces
/// of the spec. Tests substitute stand-ins.
using StageModuleFactory =
    std::function<Result<std::shared_ptr<PipelineStageModule>>(int stage, const StageLayers& layers)>;

class PipelineRank {
 public:
  /// Generates and lowers the schedule, computes the routing tables, builds
  /// this rank's stages (`factory`, or the model's pieces when empty) and its
  /// optimizer. Collective over `pp` (it exchanges parameter counts).
  /// Errors, one line naming the field: --pp not the communicator's size,
  /// --split not pp * vp stages, --batch not splitting over dp,
  /// --microbatches not dividing a replica's rows, and
  /// with the cache on a schedule that does not put stage s on rank s % pp
  /// (--schedule, naming it and the first stage off).
  static Result<std::unique_ptr<PipelineRank>> Create(const PipelineRankConfig& config, Communicator& pp,
                                                      StageModuleFactory factory = {});
  ~PipelineRank();
  PipelineRank(const PipelineRank&) = delete;
  PipelineRank& operator=(const PipelineRank&) = delete;

  /// One optimizer step. `tokens` is the step's whole batch, row-major
  /// [batch, seq_len + 1] (inputs and shifted targets), the same on every
  /// rank; DP replica d keeps rows [d * batch / dp, (d + 1) * batch / dp)
  /// (only the first and the last stage read them). A failed exchange is
  /// an IoError.
  Result<PipelineStepResult> TrainStep(const std::vector<std::int64_t>& tokens);
  /// A step with its own loss (pipeline_stage.h): `tokens` as above but with
  /// rows of `seq_len` + 1 ids for this step (the last column is not read);
  /// the last stage's rank hands each micro-batch's logits to `loss`, whose
  /// shares sum to the step's loss (PipelineStepResult::loss). Every rank passes the same seq_len; only the last
  /// stage's rank calls `loss`. One replica only (InvalidArgument naming
  /// --dp otherwise): the shares are indexed by micro-batch, not by replica.
  Result<PipelineStepResult> TrainStep(const std::vector<std::int64_t>& tokens, int seq_len, MicroBatchLoss& loss);
  /// Starts a training phase (a warm start, then the loop): the optimizer
  /// hyper-parameters, schedule, batch and LoRA of `train` replace the
  /// current ones (the stages' weights stay), a new AdamW starts and the
  /// step count restarts at 0. With train.lora enabled every stage gets the
  /// adapters the single-process model would get (by name) and only they
  /// train. The model, options, device and seed are kept. Collective over pp.
  Status BeginPhase(const TrainConfig& train);
  /// The forward-only pass: the same schedule's forwards under no-grad,
  /// the cached transport as in training, no gradient read or written.
  /// Returns the mean micro-batch loss, the same on every rank.
  Result<double> EvalStep(const std::vector<std::int64_t>& tokens);
  /// Fills every stage's weights from a Hugging Face checkpoint folder
  /// (hf_checkpoint.h), each parameter from this rank's slice of the
  /// released tensor (its TP shard, its EP experts, its ETP columns), and
  /// restarts the optimizer from them (its fp32 masters and moments).
  /// Before the first step. InvalidArgument naming the file and tensor; a
  /// stand-in stage is refused.
  Status LoadHfWeights(const CheckpointDir& checkpoint);

  /// The layout-free save (weights/sharded_save.h, sharded_checkpoint.h):
  /// writes this rank's pieces to `path`. InvalidArgument for a stand-in
  /// stage; IoError when the file cannot be written.
  Status SavePieces(const FileSystem& fs, const std::string& path) const;
  /// Fills every stage from the pieces of `save` that overlap this rank's
  /// boxes, restarts the optimizer with the saved masters, moments and
  /// update counts, and continues the step count at the save's step.
  /// InvalidArgument naming the save and piece when a box cannot be filled.
  Status LoadPieces(const ShardedSave& save);

  int step() const;
  /// Checkpoint I/O (trainer.h): writes the optimizer's state.
  void SaveOptimizer(torch::serialize::OutputArchive& archive) const;
  /// Reads an optimizer state SaveOptimizer wrote for the same parameters
  /// and continues the step count at `step`. InvalidArgument when it does
  /// not fit.
  Status LoadOptimizer(torch::serialize::InputArchive& archive, int step);
  /// The stages this rank holds, in increasing order.
  std::vector<int> stages() const;
  /// The module of stage `s` (one this rank holds).
  PipelineStageModule& stage_module(int s);

 private:
  /// Tests inject executor faults (schedule_executor.h); runs never do.
  friend void InjectFaults(PipelineRank& rank, const ExecutorFaults& faults);
  struct Impl;
  explicit PipelineRank(std::unique_ptr<Impl> impl);
  Result<PipelineStepResult> TrainStepWith(const std::vector<std::int64_t>& tokens, int seq_len, MicroBatchLoss* loss);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TRAIN_PIPELINE_RUNTIME_H_
