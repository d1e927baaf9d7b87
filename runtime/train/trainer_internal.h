// Pieces the training session (trainer.cc, train_session.cc) and the
// pipeline rank share, so that every run follows one optimizer and one step.
#ifndef KIMI_PLAN_RUNTIME_TRAIN_TRAINER_INTERNAL_H_
#define KIMI_PLAN_RUNTIME_TRAIN_TRAINER_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "common/file_system.h"
#include "common/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/train/data.h"
#include "runtime/train/pipeline_runtime.h"
#include "runtime/train/trainer.h"

namespace kp::runtime {

/// Mixed into the seed for the data, so data and initialisation differ.
inline constexpr std::uint64_t kDataSalt = 0xda7a;

/// AdamW's parameter groups: matrices decay, vectors do not.
std::vector<torch::optim::OptimizerParamGroup> ParamGroups(const std::vector<torch::Tensor>& params,
                                                           const TrainConfig& c);
/// The same groups, the decayed and the rest given.
std::vector<torch::optim::OptimizerParamGroup> ParamGroups(const std::vector<torch::Tensor>& decay,
                                                           const std::vector<torch::Tensor>& no_decay,
                                                           const TrainConfig& c);

/// The run's token source: the synthetic corpus, or the token file
/// c.data names (NotFound / InvalidArgument naming --data).
Result<std::unique_ptr<TokenSource>> OpenTokenSource(const TrainConfig& c, const FileSystem& fs);

/// A pipeline group of this rank alone (an in-process world of one), for a
/// run whose model is not split over ranks.
std::unique_ptr<Communicator> PipelineOfOne();

/// What a session reports of one pipeline step over `c.batch` sequences of
/// `c.seq_len` tokens, with the device's peak memory.
StepMetrics StepMetricsOf(const PipelineStepResult& r, const TrainConfig& c, double peak_memory_bytes);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TRAIN_TRAINER_INTERNAL_H_
