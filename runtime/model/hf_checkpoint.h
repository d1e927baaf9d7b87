// A model stage's weights in the Hugging Face layout of Kimi K2 / K2.6 and
// DeepSeek-V3 (weights/hf_names.h): written as one model.safetensors, and
// read from a checkpoint folder (weights/checkpoint_dir.h), routed experts
// in bf16/fp32 or as INT4 (weights/int4.h, dequantized to the bank's dtype).
// Each parameter and router bias of the stage is looked up by its released
// name; a missing tensor, or one of another shape or dtype, is one
// InvalidArgument naming the file and tensor, and nothing of the stage is
// changed until every tensor has been checked. A stage split over ranks
// (TP heads and vocabulary, EP experts, ETP expert FFN columns) reads only
// its slices: the checkpoint's bytes are mapped and only the slices' are
// copied (an INT4 expert, packed along its rows, is dequantized whole, then
// sliced).
#ifndef KIMI_PLAN_RUNTIME_MODEL_HF_CHECKPOINT_H_
#define KIMI_PLAN_RUNTIME_MODEL_HF_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/file_system.h"
#include "common/status.h"
#include "runtime/model/model.h"
#include "runtime/model/tensor_parallel.h"
#include "weights/checkpoint_dir.h"
#include "weights/hf_names.h"

namespace kp::runtime {

/// Writes `model`'s parameters and router biases under their released names
/// to `dir`/model.safetensors (fp32 tensors as F32, bf16 as BF16; with
/// `int4_experts`, every routed expert as compressed-tensors INT4), and,
/// for a DeepSeek-V3-architecture model, its config.json
/// (specs/hf_config.h; with the INT4 experts' quantization_config). An INT4
/// base (ExpertBankImpl::QuantizeBase) is written as its bytes, whatever
/// `int4_experts` says.
Status SaveHfCheckpoint(StageModelImpl& model, const FileSystem& fs, const std::string& dir, bool int4_experts);

/// When `dir` holds a Hugging Face config.json, that its architecture is
/// `model`'s: every shape, the RoPE (theta, YaRN, interleaving), the eps,
/// the route scale and expert groups. A mismatch is one InvalidArgument
/// naming the config and the first field that differs; a folder without a
/// config.json passes (the tensors' shapes are still checked on load).
Status CheckCheckpointArchitecture(const FileSystem& fs, const std::string& dir, const ModelSpec& model);

/// Where each of a stage's parameters lies in the released (whole) tensor,
/// by runtime name: the dimensions it is a slice of (ParameterShard: dim,
/// first, count, whole). A parameter not listed is whole. An expert bank's
/// dim 0 is the experts (EP), its FFN dimension the ETP slice.
using StageSlices = std::map<std::string, std::vector<ParameterShard>>;

/// The slices of a stage split by `tp` (ShardTensorParallel's record; null
/// for none) and whose experts are [ep_rank E / ep, ...) of E with FFN
/// columns [etp_rank F / etp, ...) of F.
StageSlices SlicesOfStage(StageModelImpl& model, const TensorParallelSplit* tp, int ep_rank, int ep, int etp_rank,
                          int etp);

/// One released tensor's box that a stage's tensor holds: the whole tensor,
/// its TP / ETP slice, or one expert of a bank (and that expert's ETP slice).
struct ReleasedPiece {
  std::string name;                  ///< the released (Hugging Face) name, bf16 form; the runtime's where none is
  std::vector<std::int64_t> whole;   ///< the released tensor's shape
  std::vector<std::int64_t> offset;  ///< where `local` starts in it, per dimension
  torch::Tensor local;               ///< the stage's values of the box: `tensor`, or one expert of it (a view)
  torch::Tensor tensor;              ///< the stage's parameter or router-bias buffer `local` is part of
  std::int64_t first_element = 0;    ///< `local`'s first element in `tensor` (expert e: e x its elements)
  bool expert = false;               ///< of a routed-expert bank
  bool sliced = false;               ///< a TP slice: the other TP ranks hold the rest, not copies
  /// kWhole, or for an INT4 base (ExpertBankImpl::QuantizeBase) one of its
  /// released INT4 tensors: `name` ends in _packed / _scale, and `whole`,
  /// `offset` and `local` count that tensor's columns (8 or 32 weights each).
  HfForm form = HfForm::kWhole;
  bool adapter = false;              ///< a LoRA adapter, under its runtime name, whole
};

/// Every released tensor's box the stage holds, in the runtime names' order
/// and, in a bank, expert order; an INT4 base as its packed words and scales.
/// A tensor the released names lack (K3's KDA and AttnRes) is NotFound
/// naming it, or with `own_names` a box under its runtime name. LoRA
/// adapters are left out, or with `adapters` each is one whole box under its
/// runtime name.
Result<std::vector<ReleasedPiece>> ReleasedPieces(StageModelImpl& model, const StageSlices& slices, bool own_names,
                                                  bool adapters = false);

/// Fills `model`'s parameters and router biases from `checkpoint`, each
/// parameter from its slice (`slices`) of the released tensor. An INT4 base
/// takes the released INT4 experts' bytes as they are, or quantises
/// released bf16 / fp32 experts (int4_linear.h); LoRA adapters are untouched.
Status LoadHfCheckpoint(StageModelImpl& model, const CheckpointDir& checkpoint, const StageSlices& slices = {});

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_MODEL_HF_CHECKPOINT_H_
