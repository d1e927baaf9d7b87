// The training configuration of the runtime's model: AdamW with
// gradient-norm clipping, a warmup-cosine learning rate, the router-bias
// update after each step, the data, the checkpoint to resume; its checks,
// its JSON record, and what a step reports. The session that trains it is
// train_session.h. No LibTorch in this header: the CLI includes it.
//
// Determinism: a batch is a pure function of (seed, step) (runtime/data.h), a
// checkpoint holds the model (parameters and router biases), the optimizer
// state, the step and the RNG state, so a resumed fp32 run on the same machine
// repeats the uninterrupted run's losses exactly.
#ifndef KIMI_PLAN_RUNTIME_TRAIN_TRAINER_H_
#define KIMI_PLAN_RUNTIME_TRAIN_TRAINER_H_

#include <cstdint>
#include <string>

#include "common/status.h"
#include "runtime/model/runtime_config.h"
#include "specs/model_spec.h"

namespace kp {
class Fields;
class PresetCatalog;
}  // namespace kp

namespace kp::runtime {

struct DataOptions {
  std::string source = "synthetic";  ///< "synthetic", or the path of a token file
  int token_bytes = 2;               ///< a token file's width: 2 (uint16) or 4 (uint32)
};

struct TrainConfig {
  ModelSpec model;
  ModelOptions options;      ///< options.seed is overwritten by `seed`
  LoraOptions lora;
  DataOptions data;
  int steps = 100;           ///< train until this many optimizer steps in total
  int batch = 8;             ///< sequences per step
  int seq_len = 64;          ///< tokens per sequence (plus one for the last target)
  double lr = 3e-3;          ///< peak learning rate
  double min_lr_ratio = 0.1; ///< the cosine ends at lr * min_lr_ratio at `steps`
  int warmup = 10;           ///< linear warmup steps
  double weight_decay = 0.1; ///< on matrices only; norms, queries and vectors are not decayed
  double beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8;
  double grad_clip = 1.0;    ///< max global L2 norm of the gradients
  double bias_update_rate = 1e-3;  ///< router-bias step per optimizer step (0: frozen)
  bool deterministic = true; ///< deterministic algorithms (and cuBLAS workspace on CUDA)
  /// AdamW's moments sharded over each parameter's replicas (distributed
  /// runs: distributed_optimizer.h); one process keeps them whole.
  bool distributed_optimizer = false;
  std::string device = "cpu";
  std::uint64_t seed = 0;    ///< initialisation, data order and LibTorch's RNG
  std::string resume;        ///< a checkpoint file to continue from; empty: start fresh
  /// A Hugging Face checkpoint folder (hf_checkpoint.h) whose weights the
  /// run starts from, each rank reading its slices; empty: initialised.
  std::string init_from;
};

/// Checks the training fields (the model is checked when it is built); the
/// message names the flag.
Status ValidateTrainConfig(const TrainConfig& c);

/// The learning rate of optimizer step `step` (0-based): linear warmup to
/// c.lr over c.warmup steps, then a cosine down to c.lr * c.min_lr_ratio at
/// c.steps. A function of the step alone, so resumed and pipelined runs
/// follow it.
double LearningRate(const TrainConfig& c, int step);

/// The whole configuration as JSON: what the `runs` table records.
std::string TrainConfigJson(const TrainConfig& c);

/// Reads back, from the object `f` reads, every field TrainConfigJson
/// writes (other keys are the caller's). The model is the preset
/// `model_name` from `catalog` scaled to the recorded shape (layers, hidden,
/// heads, experts, top-k, vocab, AttnRes block, dense layers); a recorded
/// shape no scaling of that preset gives is refused, naming the first
/// field that differs. Errors name the field ("config.lr: ...").
Status ReadTrainConfig(Fields& f, const PresetCatalog& catalog, TrainConfig* c);

/// What one optimizer step measured.
struct StepMetrics {
  int step = 0;                 ///< 1-based: the number of optimizer steps taken after this one
  double loss = 0;              ///< mean next-token cross entropy of the step's batch (nats)
  double grad_norm = 0;         ///< global L2 norm before clipping
  double lr = 0;
  double tokens_per_s = 0;
  double step_seconds = 0;
  double peak_memory_bytes = 0; ///< peak RSS on CPU, peak allocated CUDA memory on GPU
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TRAIN_TRAINER_H_
