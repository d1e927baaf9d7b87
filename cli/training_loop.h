// What `train` and `run` share around the one training session
// (runtime/train/train_session.h): the checkpoint flags, and the loop that
// steps the session to --steps, logs every step to the store, prints the
// progress line and writes the checkpoints. Built with LibTorch only; sees
// the runtime through train_session.h, which includes no LibTorch.
#ifndef KIMI_PLAN_CLI_TRAINING_LOOP_H_
#define KIMI_PLAN_CLI_TRAINING_LOOP_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/options.h"
#include "runtime/train/train_session.h"
#include "store/store.h"

namespace kp {

/// The layout as the run's record and summary show it.
nlohmann::json LayoutJson(const runtime::ParallelLayout& layout);

/// The run's record (the `runs` table's config): the training
/// configuration (TrainConfigJson) with the layout, the world size and the
/// backend, the same for `train` and `run`.
nlohmann::json SessionConfigJson(const runtime::TrainConfig& config, const runtime::ParallelLayout& layout,
                                 const runtime::TrainSession& session);

/// --resume, --init-from, --checkpoint-dir, --checkpoint-every, --save and
/// --save-every.
void AddCheckpointOptions(po::options_description& desc);
/// --resume and --init-from into `config` (ValidateTrainConfig refuses
/// both); --save-every without --save, and --save with LoRA, refused.
Status ReadCheckpointFlags(const po::variables_map& vm, runtime::TrainConfig* config);

struct TrainingLoopOptions {
  int log_every = 10;          ///< a progress line every so many steps (and the first and last)
  std::string checkpoint_dir;  ///< empty: no checkpoints
  int checkpoint_every = 0;    ///< steps between checkpoints (0: only at the end)
  std::string save_dir;        ///< layout-free saves (TrainSession::SaveShards); empty: none
  int save_every = 0;          ///< steps between saves (0: only at the end)
};
/// The loop's options from --log-every and the checkpoint flags.
TrainingLoopOptions LoopOptionsFrom(const po::variables_map& vm);

/// What the loop saw, on every rank (the session's metrics are global).
struct TrainingLoopResult {
  int first_step = 1;                  ///< the first step this process ran (after a resume, not 1)
  std::vector<double> losses;          ///< one per step run
  std::vector<double> tokens_per_s;
  double peak_memory_bytes = 0;        ///< the largest of every rank's, over the steps
  std::vector<double> rank_peak_memory_bytes;        ///< the last step's, by world rank
  std::vector<double> rank_build_peak_memory_bytes;  ///< by world rank
  std::string checkpoint;              ///< the last checkpoint written ("" when none)
  std::string save;                    ///< the last save's step folder ("" when none)
};

/// Steps `session` to config.steps. With `store` (rank 0 of a run, the one
/// process of `train`) each step and its pipeline traffic is appended to
/// run `run_id` and a progress line goes to stderr for the first step, every
/// log_every and the last. Every rank writes its checkpoint file at every
/// checkpoint_every step and at the end (step-N.pt in checkpoint_dir), and
/// the ranks together a save at every save_every step and at the end. The
/// first error ends the loop.
Result<TrainingLoopResult> RunTrainingLoop(runtime::TrainSession& session, const runtime::TrainConfig& config,
                                           const TrainingLoopOptions& options, Store* store, std::int64_t run_id,
                                           CliEnv& env);

}  // namespace kp

#endif  // KIMI_PLAN_CLI_TRAINING_LOOP_H_
