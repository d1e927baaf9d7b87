// The one training session of `kimi-plan train` and `kimi-plan run`: the
// model of trainer.h trained by one PipelineRank (pipeline_runtime.h) over a
// world of ranks: a world of one in this process (`train`), or one rank of
// a c10d world (`run`) with pipeline parallelism (the simulator's action
// lists), data parallelism (gradient all-reduce, reproducible norm), expert,
// tensor and context parallelism, composed. Both write the same step
// metrics and the same checkpoints: each rank its own file (one file for a
// world of one), the model of each of its stages, the optimizer state, the
// step, the RNG state, the model's shape and the layout; a run resumes from
// them on the same layout and, in fp32 on one machine, repeats the
// uninterrupted run's losses exactly. No LibTorch in this header: the CLI
// includes it.
//
// Rank layout (Megatron / torchtitan, pipeline outermost): world = pp x dp,
// rank = p * dp + d for pipeline rank p and DP rank d. The DP groups are one
// stage's replicas {p * dp + d : d}, the pipeline groups one replica's
// stages {p * dp + d : p}; EP and ETP fold into DP (ep x etp divides dp):
// rank_groups.h has the expert groups. E.g. pp 2 x dp 2: DP {0,1} {2,3},
// pipelines {0,2} {1,3}.
//
// Every rank reads the whole step batch from the deterministic source
// (data.h) and keeps its DP slice: rows [d * b / dp, (d + 1) * b / dp); a
// pipeline runs that slice as b / dp micro-batches of one sequence, then
// each stage's gradients are averaged over its DP group, and the norm is
// summed in the whole model's parameter order over the pipeline group. The
// reported loss is the mean of the slices' losses, the same on every rank.
// Thread-safety: one thread.
#ifndef KIMI_PLAN_RUNTIME_TRAIN_TRAIN_SESSION_H_
#define KIMI_PLAN_RUNTIME_TRAIN_TRAIN_SESSION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/file_system.h"
#include "common/status.h"
#include "runtime/comm/rendezvous.h"
#include "runtime/train/trainer.h"
#include "specs/stage_split.h"

namespace kp::runtime {

/// The parallel layout a run executes (the planner's names).
struct ParallelLayout {
  int pp = 1;                      ///< pipeline stages (ranks)
  int vp = 1;                      ///< virtual stages per pipeline rank
  int dp = 1;                      ///< data-parallel replicas
  int ep = 1;                      ///< expert parallelism, folded into dp (ep x etp divides dp)
  int etp = 1;                     ///< expert tensor parallelism: each expert's FFN split, folded into dp
  int tp = 1;                      ///< tensor parallelism inside each stage (innermost)
  int cp = 1;                      ///< context parallelism: each sequence split over cp ranks (next to TP)
  bool sequence_parallel = true;   ///< with tp: the residual stream split along the sequence
  std::string schedule = "1f1b";   ///< the simulator's schedule name
  bool attnres_cache = false;      ///< the cached AttnRes transport of PR #4312
  /// The decoder layers of each stage (pp x stages per rank of them, the
  /// embedding on the first and the head on the last, as the planner's
  /// rule gives them: SplitLayers); empty: torchtitan's even split.
  StageSplit split;
  /// Sequences per micro-batch (the planner's --micro-batch): a replica's
  /// b / dp rows run as b / dp / micro_batch micro-batches. 0: one sequence
  /// each with a pipeline, the replica's rows at once without.
  int micro_batch = 0;
  int world() const { return pp * dp * cp * tp; }
  /// Micro-batches per replica and step of `batch` sequences.
  int MicroBatches(int batch) const;
};

/// Checks the layout against the world size, the model and the batch; the
/// message names the flag: --nproc (world != pp x dp x cp x tp), --ep (ep x
/// etp must divide tp x dp x cp; ep the routed experts; with tp only under
/// sequence parallelism), --cp (2 cp chunks of
/// the sequence, each as long as KDA's convolution reaches back; not with
/// LoRA), --etp (must divide the expert
/// FFN width), --batch (must split evenly over dp),
/// --micro-batch (must divide b / dp), --batch (a pipeline replica's
/// micro-batches must be a multiple of pp),
/// --tp / --sequence-parallel (CheckTensorParallelSplit; not with LoRA yet),
/// --layer-split (a split of other than pp x stages per rank stages, or of
/// other than the model's layers).
Status ValidateLayout(const ParallelLayout& l, int world, const TrainConfig& c);

/// The parameters each pipeline rank builds, rank 0 first: its stages, its
/// TP shard of each, its EP x ETP share of the routed experts (the same on
/// every TP, CP and DP rank of it; LoRA adapters not counted). Counted by the
/// runtime's own sharding on deferred (meta) weights, so nothing is made.
/// Requires a layout ValidateLayout accepts.
Result<std::vector<std::int64_t>> ParametersPerPipelineRank(const ParallelLayout& l, const TrainConfig& c);

/// Per step, pipeline stage and direction ("forward" activations, "backward"
/// gradients): the AttnRes block entries and the bytes this rank sent.
struct TrafficRow {
  int stage = 0;
  std::string direction;
  std::int64_t entries = 0;
  std::int64_t bytes = 0;
};

struct SessionStepMetrics {
  StepMetrics step;                      ///< loss and grad norm are global (same on every rank)
  std::vector<TrafficRow> traffic;  ///< every stage's sends of one replica, the same on every rank; empty without a pipeline
  /// Every rank's peak memory since the session was built (PeakMemoryBytes:
  /// the model's construction is left out), in world-rank order, the same
  /// on every rank; step.peak_memory_bytes is their largest.
  std::vector<double> rank_peak_memory_bytes;
  /// Every rank's peak while it built its part of the model (sharded
  /// construction: its own shards only), in world-rank order.
  std::vector<double> rank_build_peak_memory_bytes;
};

/// The file rank `rank` of a world of `world` writes for the checkpoint
/// `path`: `path` itself for a world of one, else "-rank-R" put before its
/// ".pt" (or after it when it has none): step-8.pt -> step-8-rank-1.pt.
std::string RankCheckpointPath(const std::string& path, int rank, int world);

class TrainSession {
 public:
  /// A world of one in this process (`train`): the whole model one stage,
  /// every layout size 1. Loads config.init_from (a Hugging Face folder) or
  /// config.resume when set: a save folder or step folder of SaveShards
  /// (any layout), else a file of SaveCheckpoint (this layout). Errors: a shape the
  /// model cannot take, a missing or truncated token file, an unreadable
  /// checkpoint or one of another shape are InvalidArgument / NotFound
  /// naming the flag.
  static Result<std::unique_ptr<TrainSession>> Create(const TrainConfig& config, const FileSystem& fs);
  /// One rank of a c10d world (`run`): meets the other ranks (ConnectC10d),
  /// builds the groups of `layout`, this rank's shards of the model and the
  /// optimizer, and loads this rank's slices of config.init_from or its
  /// file of config.resume when set. Errors
  /// name the flag (InvalidArgument) or the rendezvous (IoError).
  static Result<std::unique_ptr<TrainSession>> Create(const TrainConfig& config, const ParallelLayout& layout,
                                                      const Rendezvous& rendezvous, const C10dOptions& c10d,
                                                      const FileSystem& fs);
  ~TrainSession();
  TrainSession(const TrainSession&) = delete;
  TrainSession& operator=(const TrainSession&) = delete;

  /// One optimizer step over the global batch. A peer that died or hung is
  /// an IoError naming it and the operation.
  Result<SessionStepMetrics> Step();
  /// Writes this rank's file of the checkpoint `path`
  /// (RankCheckpointPath), aside then renamed, so a run killed mid-save
  /// keeps the last complete one. IoError naming --checkpoint-dir.
  Status SaveCheckpoint(const std::string& path) const;
  /// Collective over the world: writes the layout-free save of this step
  /// (weights/sharded_save.h) under the save folder `dir`: each rank its
  /// file DIR/step-N/rank-R.safetensors, then, once every rank's is
  /// complete, rank 0 the manifest and DIR/latest. A run resumes from it
  /// (`resume` naming DIR or a step folder) on this or any other layout.
  /// InvalidArgument with LoRA (its adapters are not saved so); IoError
  /// naming --save when a rank cannot write.
  Status SaveShards(const std::string& dir) const;
  /// Writes the LoRA adapters alone (lora.rank > 0, a world of one).
  Status SaveAdapters(const std::string& path) const;

  int rank() const;
  int world_size() const;
  int step() const;  ///< optimizer steps taken so far
  std::string backend() const;
  std::int64_t parameter_count() const;  ///< this rank's parameters (experts and TP shards its own)
  std::int64_t trainable_count() const;  ///< those of them the optimizer updates
  std::string data_description() const;

 private:
  struct Impl;
  explicit TrainSession(std::unique_ptr<Impl> impl);
  static Result<std::unique_ptr<Impl>> NewImpl(const TrainConfig& config, const ParallelLayout& layout,
                                               int world_size, const FileSystem& fs);
  static Result<std::unique_ptr<TrainSession>> Start(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TRAIN_TRAIN_SESSION_H_
