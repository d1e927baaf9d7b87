// One rank of the distributed trainer (`kimi-plan run`): the model of
// trainer.h trained over c10d with data parallelism (gradient all-reduce,
// reproducible norm) and expert parallelism (all-to-all token dispatch).
// No LibTorch in this header: the CLI includes it.
//
// Every rank reads the whole step batch from the deterministic source
// (data.h) and keeps its DP slice: rows [d * b / dp, (d + 1) * b / dp). The
// reported loss is the mean of the slices' losses, the same on every rank.
// Thread-safety: one thread.
#ifndef KIMI_PLAN_RUNTIME_DIST_TRAINER_H_
#define KIMI_PLAN_RUNTIME_DIST_TRAINER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/file_system.h"
#include "common/status.h"
#include "runtime/rendezvous.h"
#include "runtime/trainer.h"

namespace kp::runtime {

/// The parallel layout a run executes (the planner's names).
struct ParallelLayout {
  int pp = 1;                      ///< pipeline stages (ranks)
  int vp = 1;                      ///< virtual stages per pipeline rank
  int dp = 1;                      ///< data-parallel replicas
  int ep = 1;                      ///< expert parallelism, folded into dp (ep divides dp)
  std::string schedule = "1f1b";   ///< the simulator's schedule name
  bool attnres_cache = false;      ///< the cached AttnRes transport of PR #4312
  int world() const { return pp * dp; }
};

/// Checks the layout against the world size, the model and the batch; the
/// message names the flag: --nproc (world != pp x dp), --ep (must divide
/// --dp and the routed experts), --batch (must split evenly over dp),
/// --dp (a pipeline needs dp 1), --batch (a pipeline's batch divides into pp).
Status ValidateLayout(const ParallelLayout& l, int world, const TrainConfig& c);

/// Whether this build executes pipelines (pp > 1 or vp > 1): true; with a
/// pipeline, dp must be 1 (composition with DP/EP is not done yet).
bool RunsPipeline();

/// Per step, pipeline stage and direction ("forward" activations, "backward"
/// gradients): the AttnRes block entries and the bytes this rank sent.
struct TrafficRow {
  int stage = 0;
  std::string direction;
  std::int64_t entries = 0;
  std::int64_t bytes = 0;
};

struct DistStepMetrics {
  StepMetrics step;                      ///< loss and grad norm are global (same on every rank)
  std::vector<TrafficRow> traffic;  ///< every stage's sends, the same on every rank; empty without a pipeline
};

class DistTrainSession {
 public:
  /// Meets the other ranks (ConnectC10d), builds the groups of `layout`, the
  /// model (experts sharded over EP) and the optimizer. Errors name the
  /// flag (InvalidArgument) or the rendezvous (IoError).
  static Result<std::unique_ptr<DistTrainSession>> Create(const TrainConfig& config, const ParallelLayout& layout,
                                                          const Rendezvous& rendezvous, const C10dOptions& c10d,
                                                          const FileSystem& fs);
  ~DistTrainSession();
  DistTrainSession(const DistTrainSession&) = delete;
  DistTrainSession& operator=(const DistTrainSession&) = delete;

  /// One optimizer step over the global batch. A peer that died or hung is
  /// an IoError naming it and the operation.
  Result<DistStepMetrics> Step();

  int rank() const;
  int world_size() const;
  int step() const;
  std::string backend() const;
  std::int64_t local_parameter_count() const;  ///< this rank's share (experts sharded)
  std::string data_description() const;

 private:
  struct Impl;
  explicit DistTrainSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_DIST_TRAINER_H_
