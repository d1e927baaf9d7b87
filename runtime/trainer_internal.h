// Pieces of the single-process trainer that the distributed one
// (dist_trainer.cc) shares, so both follow the same schedule and optimizer.
#ifndef KIMI_PLAN_RUNTIME_TRAINER_INTERNAL_H_
#define KIMI_PLAN_RUNTIME_TRAINER_INTERNAL_H_

#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/file_system.h"
#include "common/status.h"
#include "runtime/trainer.h"

namespace kp::runtime {

/// Mixed into the seed for the data, so data and initialisation differ.
inline constexpr std::uint64_t kDataSalt = 0xda7a;

/// The learning rate of optimizer step `step` (0-based): linear warmup, then
/// a cosine to lr * min_lr_ratio at c.steps.
/// AdamW's parameter groups: matrices decay, vectors do not.
std::vector<torch::optim::OptimizerParamGroup> ParamGroups(const std::vector<torch::Tensor>& params,
                                                           const TrainConfig& c);
/// "cpu", "cuda" or "cuda:N"; InvalidArgument naming --device.
Result<torch::Device> ParseDevice(const std::string& name);
/// Deterministic algorithms for this process (LibTorch's flags are global):
/// deterministic kernels and cuDNN, no cuDNN autotuning, and on CUDA the
/// cuBLAS workspace setting deterministic cuBLAS needs (read at cuBLAS's
/// first use, so call this before any CUDA work).
void UseDeterministicAlgorithms(torch::Device device);
/// The peak resident set size (VmHWM) from /proc, 0 when unreadable.
double PeakRssBytes(const FileSystem& fs);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TRAINER_INTERNAL_H_
