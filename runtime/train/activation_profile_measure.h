// Measures a model's activation profile (specs/activation_profile.h): one
// forward and backward of a fresh model, layer by layer, on one device, the
// allocator's live bytes read around each piece (the CUDA caching
// allocator's on a GPU, the counting CPU allocator's, runtime/comm/
// cpu_memory.h, on the CPU). `kimi-plan profile` and the train bench's
// --memory-trace call it. No LibTorch in this header: the CLI includes it.
// Thread-safety: one thread; it installs the CPU counter (process-wide).
#ifndef KIMI_PLAN_RUNTIME_TRAIN_ACTIVATION_PROFILE_MEASURE_H_
#define KIMI_PLAN_RUNTIME_TRAIN_ACTIVATION_PROFILE_MEASURE_H_

#include <string>

#include "common/status.h"
#include "runtime/model/runtime_config.h"
#include "specs/activation_profile.h"
#include "specs/model_spec.h"

namespace kp::runtime {

/// What the measurement saw besides the profile, in bytes.
struct ActivationTrace {
  ActivationProfile profile;
  double weights_bytes = 0;      ///< the model's parameters, before anything ran
  double gradients_bytes = 0;    ///< their gradients, made (zero) before the forward
  double forward_end_bytes = 0;  ///< live at the end of the forward (weights, gradients, activations)
  double peak_bytes = 0;         ///< the most live during the backward
};

/// Micro-batches of `batch` and of 2 x `batch` sequences of `seq_len` random
/// tokens through a model built from `spec` and `options` on `device`
/// ("cpu", "cuda", "cuda:N"), each piece's growth split into a fixed part and
/// a part per token that add up to the `batch` pass (the profile's format),
/// and its time as fixed + per-token seconds through both (after one
/// untimed pass of each size);
/// the other fields are the `batch` pass's. The same two passes again with
/// every layer's channel mixer recomputed in the backward (a second model,
/// built after the first is gone) give the profile's ffn_recomputed
/// figures. The parameters' gradients exist
/// (zero) from before the forward, as in a trainer past its first step. Errors: the model's
/// (BuildModel) and the device's (InvalidArgument naming --device).
/// With `lora` enabled the model trains LoRA adapters on its frozen base
/// (options.weight_dtype should then be bf16, as `run` stores it), and only
/// the adapters have gradients; the profile records the rank.
Result<ActivationTrace> MeasureActivationProfile(const ModelSpec& spec, const ModelOptions& options, int batch,
                                                 int seq_len, const std::string& device,
                                                 const LoraOptions& lora = {});

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TRAIN_ACTIVATION_PROFILE_MEASURE_H_
