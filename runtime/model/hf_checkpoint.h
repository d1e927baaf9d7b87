// A model stage's weights in the Hugging Face layout of Kimi K2 / K2.6 and
// DeepSeek-V3 (weights/hf_names.h): written as one model.safetensors, and
// read from a checkpoint folder (weights/checkpoint_dir.h), routed experts
// in bf16/fp32 or as INT4 (weights/int4.h, dequantized to the bank's dtype).
// Each parameter and router bias of the stage is looked up by its released
// name; a missing tensor, or one of another shape or dtype, is one
// InvalidArgument naming the file and tensor, and nothing of the stage is
// changed until every tensor has been checked. Whole tensors only: a stage
// whose experts or heads are split over ranks (EP, ETP, TP) is refused.
#ifndef KIMI_PLAN_RUNTIME_MODEL_HF_CHECKPOINT_H_
#define KIMI_PLAN_RUNTIME_MODEL_HF_CHECKPOINT_H_

#include <string>

#include "common/file_system.h"
#include "common/status.h"
#include "runtime/model/model.h"
#include "weights/checkpoint_dir.h"

namespace kp::runtime {

/// Writes `model`'s parameters and router biases under their released names
/// to `dir`/model.safetensors (fp32 tensors as F32, bf16 as BF16; with
/// `int4_experts`, every routed expert as compressed-tensors INT4).
Status SaveHfCheckpoint(StageModelImpl& model, const FileSystem& fs, const std::string& dir, bool int4_experts);

/// Fills `model`'s parameters and router biases from `checkpoint`.
Status LoadHfCheckpoint(StageModelImpl& model, const CheckpointDir& checkpoint);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_MODEL_HF_CHECKPOINT_H_
