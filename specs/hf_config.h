// A released model's Hugging Face config.json as a ModelSpec, and back.
// The architecture is DeepSeek-V3's (model_type deepseek_v3, or kimi_k2;
// Kimi K2.5 / K2.6 wrap it as the text_config of a multimodal config): MLA,
// a first dense block, sigmoid-scored routed experts with a selection bias,
// shared experts. Everything the runtime's forward depends on is read (RoPE
// and YaRN, the eps, the route scale, expert groups); values the runtime
// cannot run (tied embeddings, softmax scoring, unnormalised top-k, another
// activation) are refused naming the key, so a checkpoint is never run under
// an architecture it was not trained with. Unused keys are ignored.
#ifndef KIMI_PLAN_SPECS_HF_CONFIG_H_
#define KIMI_PLAN_SPECS_HF_CONFIG_H_

#include <string>

#include "common/status.h"
#include "specs/model_spec.h"

namespace kp {

class Fields;

/// YaRN's fields from `y` (a preset's rope.yarn, or an HF config's
/// rope_scaling / rope_parameters): factor and the original context (under
/// `original_key`) required, the betas and mscales optional.
Status ReadYarnFields(Fields& y, const char* original_key, YarnScaling* yarn);

/// True when the JSON text is an object with "model_type" (a Hugging Face
/// config), not a preset-format model.
bool IsHfConfig(const std::string& json_text);

/// The ModelSpec of a config.json, named `name`. The INT4 routed experts of
/// a compressed-tensors pack-quantized config set storage to 4 bits and the
/// config's group size. Errors name the config key.
Result<ModelSpec> ModelSpecFromHfConfig(const std::string& json_text, const std::string& name);

/// The config.json of a DeepseekV3ForCausalLM with this architecture (the
/// 4.x key style that transformers 5, vLLM and SGLang read: rope_theta and
/// rope_scaling), weights in `torch_dtype` ("bfloat16" or "float32"). Only
/// for models ModelSpecFromHfConfig could have made: MLA in every layer,
/// untied, gated, no attention residuals; else an InvalidArgument naming the
/// field. With `int4_experts`, the routed experts are declared compressed-
/// tensors pack-quantized INT4 in groups of 32 (quantization_config, every
/// other linear in its ignore list), as Kimi K2.6 releases them.
Result<std::string> HfConfigFromModelSpec(const ModelSpec& m, const std::string& torch_dtype,
                                          bool int4_experts = false);

}  // namespace kp

#endif  // KIMI_PLAN_SPECS_HF_CONFIG_H_
