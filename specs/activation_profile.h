// What one engine's layers keep for the backward, measured: the bytes per
// token each layer of a model leaves allocated after its forward on one
// device, one process (no TP, CP or EP), no recomputation. `kimi-plan
// profile` measures it with the runtime; `kimi-plan plan
// --activation-profile` prices the native engine's activations from it
// instead of the Megatron-LM terms (planner/memory_model.h), scaling each
// layer by how those terms shrink under the plan's TP, SP, CP and ETP.
//
// File format (JSON, versioned by "schema"; docs/planner.md):
//   {"schema": "kimi-plan.activation-profile/1", "model": "kimi-k3-debug",
//    "device": "cpu", "dtype": "fp32", "tokens": 64,
//    "embedding": 1024.0, "layers": [..., one per layer], "head": 9000.0,
//    "backward": 5000.0, "source": "..."}
// every byte figure per token of the measured micro-batch.
#ifndef KIMI_PLAN_SPECS_ACTIVATION_PROFILE_H_
#define KIMI_PLAN_SPECS_ACTIVATION_PROFILE_H_

#include <string>
#include <vector>

#include "common/status.h"

namespace kp {

struct ActivationProfile {
  std::string model;           ///< the model's name, as measured
  std::string device;          ///< "cpu", "cuda" (what the counts came from)
  std::string dtype;           ///< the activations' dtype: "fp32" or "bf16"
  int tokens = 0;              ///< tokens of the measured micro-batch
  double embedding = 0;        ///< bytes per token the embedding keeps
  std::vector<double> layers;  ///< bytes per token each decoder layer keeps, layer 0 first
  double head = 0;             ///< bytes per token the head and the loss keep
  double backward = 0;         ///< bytes per token the backward holds above the forward's end, at its peak
  std::string source;          ///< how it was measured
};

/// Reads the format above; errors name the field ("layers[3]: must be a
/// number from 0 ...").
Result<ActivationProfile> ParseActivationProfile(const std::string& text);
/// The format above, which ParseActivationProfile reads back exactly.
std::string ActivationProfileToJson(const ActivationProfile& p);

}  // namespace kp

#endif  // KIMI_PLAN_SPECS_ACTIVATION_PROFILE_H_
