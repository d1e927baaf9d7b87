// Parameter counts derived from a ModelSpec, grouped the way parallelism
// shards them: attention, dense FFN, shared experts and latent projections
// split over TP; routed experts over EP x ETP; router and norms replicated;
// embedding and head vocabulary-parallel on the first and last stage.
#ifndef KIMI_PLAN_SPECS_PARAM_COUNT_H_
#define KIMI_PLAN_SPECS_PARAM_COUNT_H_

#include <vector>

#include "specs/model_spec.h"

namespace kp {

/// Parameters of one decoder layer, by group.
struct LayerParams {
  double attention = 0;       ///< q/k/v/o, latent projections, KDA gates and convs
  /// The part of `attention` tensor parallelism leaves whole on every rank
  /// (runtime/model/tensor_parallel.h, as Megatron-LM's MLA): MLA's q and kv
  /// down-projections and their norms; KDA's low-rank gates' first maps and
  /// its gated-norm weight. The rest of `attention` is split by heads.
  double attention_replicated = 0;
  double dense_ffn = 0;       ///< dense SwiGLU (dense layers only)
  double routed_expert = 0;   ///< one routed expert
  double routed_experts = 0;  ///< all routed experts of the layer
  double shared_experts = 0;
  double latent_proj = 0;     ///< LatentMoE down and up projections (whole on every TP rank)
  double router = 0;          ///< gate weight and per-expert bias
  double norms = 0;           ///< RMSNorm weights, attention-residual queries
  double total() const {
    return attention + dense_ffn + routed_experts + shared_experts + latent_proj + router + norms;
  }
  /// What one token reads: top_k routed experts instead of all of them.
  double active(int top_k) const {
    return total() - routed_experts + routed_expert * top_k;
  }
};

struct ParamCount {
  std::vector<LayerParams> layers;
  /// One entry per MTP layer (ModelSpec::mtp_layers): a copy of the last
  /// decoder layer's, its `attention` also holding the 2h -> h projection
  /// (split over TP, as Megatron-LM's column-parallel eh_proj) and its
  /// `norms` the two input norms; counted in `total`, not in `active` (the
  /// convention of DeepSeek-V3's 671B / 37B).
  std::vector<LayerParams> mtp;
  double embedding = 0;
  double head = 0;         ///< 0 when tied
  double final_norm = 0;   ///< final norm plus the attention-residual output aggregation
  double total = 0;
  /// Parameters one token's forward reads, embedding and head included
  /// (the convention of the "32B active" figures).
  double active = 0;
  /// Sum over layers of each group.
  LayerParams sum;
};

double MhaParams(const ModelSpec& m);
double MlaParams(const ModelSpec& m);
double KdaParams(const ModelSpec& m);
double SwigluParams(int in, int ffn);

ParamCount CountParams(const ModelSpec& m);

}  // namespace kp

#endif  // KIMI_PLAN_SPECS_PARAM_COUNT_H_
