// The logits of a released checkpoint's forward, for checking the runtime's
// model against the reference implementation of its architecture
// (scripts/hf_logits_check.py runs `kimi-plan logits` beside transformers).
// No LibTorch in this header: the CLI includes it.
// Thread-safety: one thread.
#ifndef KIMI_PLAN_RUNTIME_MODEL_HF_FORWARD_H_
#define KIMI_PLAN_RUNTIME_MODEL_HF_FORWARD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/file_system.h"
#include "common/status.h"
#include "runtime/model/runtime_config.h"
#include "specs/model_spec.h"

namespace kp::runtime {

/// One sequence's logits, [tokens][vocab], fp32.
using Logits = std::vector<std::vector<float>>;

/// "5,17,3": comma-separated token ids (each 0 to 999999999, at most 65536);
/// anything else is an InvalidArgument naming --tokens.
Result<std::vector<std::int64_t>> ParseTokenList(const std::string& text);

/// {"model", "tokens", "logits": [T][vocab]} on one line: what `kimi-plan
/// logits --json` and kimi-plan-logits print.
std::string LogitsJson(const std::string& model, const std::vector<std::int64_t>& tokens, const Logits& logits);

/// Builds `spec` whole with `options` (dtype, weight_dtype), loads the
/// Hugging Face checkpoint folder `init_from` into it (its config.json, when
/// there is one, must describe `spec`: CheckCheckpointArchitecture), and runs
/// `tokens` as one sequence through it on `device` ("cpu", "cuda", "cuda:N")
/// without gradients. Errors: a token outside the vocabulary (naming
/// --tokens), the checkpoint's (naming --init-from, the file and tensor),
/// the device's.
Result<Logits> ForwardLogits(const ModelSpec& spec, const ModelOptions& options, const FileSystem& fs,
                             const std::string& init_from, const std::vector<std::int64_t>& tokens,
                             const std::string& device);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_MODEL_HF_FORWARD_H_
