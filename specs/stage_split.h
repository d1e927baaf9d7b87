// How embedding, decoder layers and head are cut into pipeline stages. The
// planner sizes stages from it, the simulator routes attention-residual
// blocks along it, and the runtime builds its stage modules from it: one
// split, computed once, used by all three.
#ifndef KIMI_PLAN_SPECS_STAGE_SPLIT_H_
#define KIMI_PLAN_SPECS_STAGE_SPLIT_H_

#include <string>
#include <vector>

#include "common/status.h"

namespace kp {

/// One stage: decoder layers [first_layer, end_layer), plus the embedding on
/// stage 0 and the head (final norm, aggregation, lm_head) on the last stage.
struct StageLayers {
  int first_layer = 0;
  int end_layer = 0;
  bool embedding = false;
  bool head = false;
  int layer_count() const { return end_layer - first_layer; }
};

struct StageSplit {
  std::vector<StageLayers> stages;
  int num_stages() const { return static_cast<int>(stages.size()); }
  /// The stage holding `layer`.
  int StageOfLayer(int layer) const;
  /// "emb,0-1 | 2-4 | 5-6 | 7,head"
  std::string ToString() const;
};

/// torchtitan's generate_llm_fqn_per_model_part with input and output
/// weight 1: layers + 2 units dealt evenly, the first `units % stages`
/// stages one more. Rejects a split with an empty middle stage, as the
/// trainer would fail on it, naming the stage.
Result<StageSplit> EvenSplit(int layers, int stages);

/// An explicit split: decoder layers per stage, comma separated
/// ("1,2,2,1,1,1,1,1,1,1,1,1,1,1,1,0"); must sum to `layers`.
Result<StageSplit> ParseSplit(const std::string& counts, int layers, const std::string& field = "--split");

}  // namespace kp

#endif  // KIMI_PLAN_SPECS_STAGE_SPLIT_H_
