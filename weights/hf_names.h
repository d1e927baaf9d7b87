// The Hugging Face names of Kimi K2 / K2.6 and DeepSeek-V3 checkpoints
// (DeepseekV3ForCausalLM: model.layers.N.self_attn.q_a_proj.weight, ...)
// against the runtime's parameter names (runtime/model: layers.N.attention.
// q_a.weight, ...), both ways, from one table (hf_names.cc, kNameTable).
// A routed expert E of layer N is one slice of the runtime's expert bank
// (layers.N.moe.experts.gate, [experts, ffn, hidden]); an INT4 expert is
// three tensors (weight_packed, weight_scale, weight_shape, weights/int4.h)
// for that one slice. The router's e_score_correction_bias is the runtime
// router's bias buffer. No LibTorch. Thread-safety: pure functions.
#ifndef KIMI_PLAN_WEIGHTS_HF_NAMES_H_
#define KIMI_PLAN_WEIGHTS_HF_NAMES_H_

#include <string>
#include <vector>

#include "common/status.h"

namespace kp {

/// How a Hugging Face tensor holds its runtime tensor.
enum class HfForm {
  kWhole,        ///< the tensor as is (in its dtype)
  kInt4Packed,   ///< weight_packed: int32, eight INT4 values a word
  kInt4Scale,    ///< weight_scale: bf16, one per group of 32
  kInt4Shape,    ///< weight_shape: int32 [rows, cols]
};

struct RuntimeTarget {
  std::string name;   ///< the runtime's parameter or buffer
  int expert = -1;    ///< the slice of an expert bank (dim 0), -1 for a whole tensor
  HfForm form = HfForm::kWhole;
};

/// The runtime tensor a Hugging Face tensor loads into; NotFound "NAME: not a
/// tensor of a Kimi K2 / DeepSeek-V3 checkpoint" for names the table lacks.
Result<RuntimeTarget> RuntimeTargetOf(const std::string& hf_name);

/// The Hugging Face names of a runtime parameter: one, or for an expert bank
/// of `experts` experts one per expert (bf16 form; with `int4` the three
/// INT4 tensors per expert). NotFound naming a runtime name the table lacks.
Result<std::vector<std::string>> HfNamesOf(const std::string& runtime_name, int experts, bool int4);

}  // namespace kp

#endif  // KIMI_PLAN_WEIGHTS_HF_NAMES_H_
