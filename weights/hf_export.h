// `checkpoint export`: a layout-free save (sharded_save.h) written as a
// servable Hugging Face folder. Every "model/" tensor of the save is
// assembled whole; an INT4 base (its _packed and _scale pieces) gets the
// weight_shape tensor compressed-tensors adds beside them; LoRA adapters,
// saved under the runtime's names (NAME.lora_a / NAME.lora_b of a
// projection, BANK.gate_lora_a ... of an expert bank), are never written as
// tensors: they are folded into the weights they adapt when asked, else left
// out and counted.
//
// Folding: W' = W + (alpha / rank) B A in fp32 (alpha and rank from the
// save's recorded shape), W read as stored (an INT4 base dequantized, then
// written in bf16: a merged update would be lost to re-quantisation), and
// written in bf16 when asked or when W was bf16 or INT4.
// No LibTorch. Thread-safety: pure functions over an immutable save.
#ifndef KIMI_PLAN_WEIGHTS_HF_EXPORT_H_
#define KIMI_PLAN_WEIGHTS_HF_EXPORT_H_

#include <cstdint>
#include <map>
#include <string>

#include "common/file_system.h"
#include "common/status.h"
#include "weights/sharded_save.h"

namespace kp {

struct ExportOptions {
  bool bf16 = true;                       ///< fp32 tensors rounded to bf16 (nearest even), else as stored
  std::int64_t max_shard_bytes = 5LL << 30;  ///< a shard file's most bytes (one tensor may exceed it alone)
  bool merge_lora = false;                ///< fold the save's adapters into the weights they adapt
};

struct ExportSummary {
  std::int64_t tensors = 0;   ///< tensors written
  std::int64_t adapters = 0;  ///< adapter tensors the save holds (A and B counted apart)
  std::int64_t merged = 0;    ///< released tensors the adapters were folded into
  bool int4_experts = false;  ///< INT4 experts were written (config.json must declare them)
};

/// The released tensor (its name, bf16 form) each adapter pair of `save`
/// updates, with the pair's keys and, for an expert bank's 3-D adapter, the
/// expert's slice (-1: a 2-D adapter, the same for every expert).
struct LowRankUpdate {
  std::string a_key, b_key;
  std::int64_t a_slice = -1, b_slice = -1;
};
Result<std::map<std::string, LowRankUpdate>> AdapterUpdates(const ShardedSave& save);

/// Writes `save` to `out` as model-0000K-of-0000N.safetensors shards and
/// model.safetensors.index.json (one model.safetensors when it fits one
/// shard). Each shard is written aside, then renamed; the index last; no
/// more than one shard's bytes are held. InvalidArgument naming the key when
/// an adapter's shapes do not fit its weight, or the save records no LoRA
/// rank for its adapters.
Result<ExportSummary> ExportHfFolder(const ShardedSave& save, const FileSystem& fs, const std::string& out,
                                     const ExportOptions& options);

}  // namespace kp

#endif  // KIMI_PLAN_WEIGHTS_HF_EXPORT_H_
