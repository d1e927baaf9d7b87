// How embedding, decoder layers and head are cut into pipeline stages. The
// planner sizes stages from it, the simulator routes attention-residual
// blocks along it, and the runtime builds its stage modules from it: one
// split, computed once, used by all three.
#ifndef KIMI_PLAN_SPECS_STAGE_SPLIT_H_
#define KIMI_PLAN_SPECS_STAGE_SPLIT_H_

#include <optional>
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

/// Decoder layers per stage, in stage order.
std::vector<int> LayerCounts(const StageSplit& split);

/// The rule that cuts a model's layers into a plan's stages (`--layer-split`,
/// docs/planner.md). Whatever the rule, stage 0 holds the embedding and the
/// last stage the head.
enum class LayerSplitKind {
  kEven,      ///< torchtitan's: embedding + layers + head dealt evenly (EvenSplit)
  kMegatron,  ///< Megatron-LM's default: layers / stages on every stage (MegatronSplit)
  kExplicit,  ///< decoder layers per stage as given
  kAuto,      ///< the planner evaluates even and megatron and keeps the better
};

struct LayerSplit {
  LayerSplitKind kind = LayerSplitKind::kEven;
  std::vector<int> counts;  ///< kExplicit: decoder layers per stage, every one >= 1
  /// "even", "megatron", "auto" or the counts "2,3,3,2": what ParseLayerSplit reads back.
  std::string ToString() const;
  bool operator==(const LayerSplit&) const = default;
};

/// Reads `even`, `megatron`, `auto` or a comma-separated list of positive
/// layer counts. InvalidArgument naming --layer-split.
Result<LayerSplit> ParseLayerSplit(const std::string& text);

/// Megatron-LM's split of `layers` over pp ranks of vp virtual stages each,
/// as megatron/core/transformer/transformer_block.py
/// (get_num_layers_to_build) and transformer_layer.py
/// (get_transformer_layer_offset) build it, with the checks of
/// TransformerConfig.__post_init__: rank r holds R_r layers, `first` on rank
/// 0 and `last` on rank pp-1 when given (num_layers_in_first/last_pipeline_
/// stage, each >= 1 and divisible by vp), the rest divided equally over the
/// other ranks; each rank's layers split equally over its vp virtual stages,
/// and virtual stage j of rank r is stage j * pp + r. Without first and last
/// every stage holds layers / (pp vp). The embedding is on stage 0, the head
/// on the last. InvalidArgument naming --layer-split for what Megatron refuses.
Result<StageSplit> MegatronSplit(int layers, int pp, int vp, std::optional<int> first = std::nullopt,
                                 std::optional<int> last = std::nullopt);

/// The TransformerConfig fields that make Megatron build a given split: none
/// for its default, else num_layers_in_first/last_pipeline_stage.
struct MegatronStageLayers {
  std::optional<int> first;  ///< num_layers_in_first_pipeline_stage
  std::optional<int> last;   ///< num_layers_in_last_pipeline_stage
  bool operator==(const MegatronStageLayers&) const = default;
};

/// The fields under which MegatronSplit(layers, pp, vp, first, last) is
/// exactly `split` (the fewest: the default when it is the default).
/// InvalidArgument naming --layer-split, saying why, for a split Megatron
/// cannot build that way (unequal virtual stages of a rank, unequal middle
/// ranks, an end rank without layers, counts vp does not divide).
Result<MegatronStageLayers> MegatronStageLayersOf(const StageSplit& split, int pp, int vp);

/// The split `rule` (not kAuto) gives `layers` over pp x stages_per_rank
/// stages. An explicit list must have one count per stage and sum to the
/// layers; errors name --layer-split (EvenSplit's keep naming --pp/--vp).
Result<StageSplit> SplitLayers(const LayerSplit& rule, int layers, int pp, int stages_per_rank);

/// The rules `rule` stands for: {even, megatron} for kAuto, else itself.
std::vector<LayerSplit> SplitCandidates(const LayerSplit& rule);

}  // namespace kp

#endif  // KIMI_PLAN_SPECS_STAGE_SPLIT_H_
