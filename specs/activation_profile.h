// What one engine's layers keep for the backward, measured: the bytes each
// layer of a model leaves allocated after its forward on one device, one
// process (no TP, CP or EP), no recomputation, split into a part per token
// and a part per micro-batch that does not grow with the tokens (a bf16
// run's copies of the layer's weights, kept for the backward; the head's
// weight gradient that the chunked loss makes in the forward). `kimi-plan
// profile` measures it with the runtime at b and 2b sequences of one length;
// `kimi-plan plan --activation-profile` prices the native engine's
// activations from it instead of the Megatron-LM terms
// (planner/memory_model.h): the per-token part shrunk as those terms shrink
// under the plan's TP, SP, CP and ETP, the fixed part as the layer's
// parameters on the rank do.
//
// It also holds what the layers keep when each layer's channel mixer (an
// MoE layer's MoE block, a dense layer's MLP) is recomputed in the backward
// (Megatron's selective --recompute-modules moe and mlp, measured with both):
// the figures per token, and the backward's peak above the forward's end,
// which then includes redoing one mixer. Version 3; absent in older files.
//
// On a GPU it also holds the time each piece took (`time`): the forward of
// the embedding, of each decoder layer and of the head with the loss, and
// the whole backward, each as seconds per micro-batch plus seconds per token
// through the two measured micro-batches. `plan` prices the native engine's
// step from it (planner/step_time.cc).
//
// File format (JSON, versioned by "schema"; docs/planner.md):
//   {"schema": "kimi-plan.activation-profile/3", "model": "kimi-k3-debug",
//    "device": "cpu", "dtype": "fp32", "seq_len": 16, "tokens": 16,
//    "embedding": 1024.0, "layers": [..., one per layer], "head": 9000.0,
//    "layers_fixed": [..., one per layer], "head_fixed": 0.0,
//    "backward": 5000.0, "source": "...",
//    "ffn_recomputed": {"layers": [..., one per layer], "backward": 6000.0},  (optional)
//    "lora_rank": 8,                                                          (optional; absent: 0)
//    "time": {"embedding": [F, T], "layers": [[F, T], ...], "head": [F, T],
//             "backward": [F, T]}}          (optional; F seconds, T seconds a token)
// Version 2 is the same without "ffn_recomputed", version 1 also without
// "time"; both are still read.
// embedding, layers, head and backward in bytes per token of the measured
// micro-batch (`tokens`, sequences of `seq_len`), the *_fixed figures in
// bytes per micro-batch.
#ifndef KIMI_PLAN_SPECS_ACTIVATION_PROFILE_H_
#define KIMI_PLAN_SPECS_ACTIVATION_PROFILE_H_

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace kp {

/// A time that grows with the tokens: fixed + per_token x tokens.
struct TimeLine {
  double fixed_s = 0;
  double per_token_s = 0;
  double At(double tokens) const { return fixed_s + per_token_s * tokens; }
  bool operator==(const TimeLine&) const = default;
};

/// Forward times of each piece and the whole backward, measured together.
struct PieceTimes {
  TimeLine embedding;
  std::vector<TimeLine> layers;  ///< one per decoder layer, layer 0 first
  TimeLine head;                 ///< the head and the loss
  TimeLine backward;             ///< every piece's backward at once
  /// The backward's share for layer `l` (or the embedding and the head
  /// together, l = -1): in proportion to its forward at `tokens`, as the
  /// backward was timed as one pass.
  double BackwardShare(int l, double tokens) const;
  bool operator==(const PieceTimes&) const = default;
};

struct ActivationProfile {
  std::string model;           ///< the model's name, as measured
  std::string device;          ///< "cpu", "cuda" (what the counts came from)
  std::string dtype;           ///< the activations' dtype: "fp32" or "bf16"
  int seq_len = 0;             ///< the sequences' length (the per-token parts hold for it)
  int tokens = 0;              ///< tokens of the measured micro-batch
  double embedding = 0;        ///< bytes per token the embedding keeps
  std::vector<double> layers;  ///< bytes per token each decoder layer keeps, layer 0 first
  std::vector<double> layers_fixed;  ///< bytes per micro-batch each layer keeps whatever its tokens
  double head = 0;             ///< bytes per token the head and the loss keep
  double head_fixed = 0;       ///< bytes per micro-batch the head and the loss keep whatever the tokens
  double backward = 0;         ///< bytes per token the backward holds above the forward's end, at its peak
  /// With each layer's channel mixer recomputed in the backward: bytes per
  /// token each layer keeps, and the backward's peak above the forward's end
  /// per token. Empty / 0 where not measured (older files).
  std::vector<double> layers_ffn_recomputed;
  double backward_ffn_recomputed = 0;
  /// What the model trained: 0, its full weights; R, LoRA adapters of rank
  /// R on its frozen bf16 base (kimi-plan profile --lora-rank R).
  int lora_rank = 0;
  std::string source;          ///< how it was measured
  std::optional<PieceTimes> time;  ///< measured on a GPU; absent in version 1 files
};

/// Reads the format above; errors name the field ("layers[3]: must be a
/// number from 0 ...").
Result<ActivationProfile> ParseActivationProfile(const std::string& text);
/// The format above, which ParseActivationProfile reads back exactly.
std::string ActivationProfileToJson(const ActivationProfile& p);

}  // namespace kp

#endif  // KIMI_PLAN_SPECS_ACTIVATION_PROFILE_H_
