// How embedding, decoder layers and head are cut into pipeline stages. The
// planner sizes stages from it, the simulator routes attention-residual
// blocks along it, and the runtime builds its stage modules from it: one
// split, computed once, used by all three.
#ifndef KIMI_PLAN_SPECS_STAGE_SPLIT_H_
#define KIMI_PLAN_SPECS_STAGE_SPLIT_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kp {

/// One stage: decoder layers [first_layer, end_layer), plus the embedding on
/// stage 0 and the head (final norm, aggregation, lm_head and the loss) on
/// the last stage, and the multi-token-prediction layers it holds (`mtp`,
/// after the decoder layers: DeepSeek-V3's MTP module, Megatron's `m`). A
/// stage may hold only the embedding, only the head, or nothing (Megatron's
/// layouts allow each).
struct StageLayers {
  int first_layer = 0;
  int end_layer = 0;
  bool embedding = false;
  bool head = false;
  int mtp = 0;
  int layer_count() const { return end_layer - first_layer; }
};

struct StageSplit {
  std::vector<StageLayers> stages;
  int num_stages() const { return static_cast<int>(stages.size()); }
  /// The stage holding `layer`.
  int StageOfLayer(int layer) const;
  /// "emb,0-1 | 2-4 | 5-6 | 7,mtp,head"
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
  kAuto,      ///< the planner evaluates its candidates (SplitCandidates) and keeps the best
  kLayout,    ///< Megatron-LM's pipeline_model_parallel_layout ("Et|(tt|)*30mL")
};

struct LayerSplit {
  LayerSplit() = default;
  LayerSplit(LayerSplitKind k, std::vector<int> c) : kind(k), counts(std::move(c)) {}
  LayerSplitKind kind = LayerSplitKind::kEven;
  std::vector<int> counts;  ///< kExplicit: decoder layers per stage, every one >= 1
  std::string layout;       ///< kLayout: the layout string as given
  /// kMegatron: Megatron-LM's account_for_embedding_in_pipeline_split and
  /// account_for_loss_in_pipeline_split: the embedding (the loss) counts as
  /// one layer of the split, so the first (last) stage holds one decoder
  /// layer fewer.
  bool account_for_embedding = false;
  bool account_for_loss = false;
  /// "even", "megatron", "megatron+embedding+loss", "auto", the counts
  /// "2,3,3,2" or the layout: what ParseLayerSplit reads back.
  std::string ToString() const;
  bool operator==(const LayerSplit&) const = default;
};

/// Reads `even`, `megatron` (with `+embedding` and/or `+loss`: the
/// account-for flags), `auto`, a comma-separated list of positive layer
/// counts, or a Megatron layout (its characters E t m L | ( ) * , and
/// digits; its meaning is checked against the model in SplitLayers).
/// InvalidArgument naming --layer-split.
Result<LayerSplit> ParseLayerSplit(const std::string& text);

/// Megatron-LM's layout string as its parser reads it
/// (megatron/core/transformer/pipeline_parallel_layer_layout.py,
/// parse_str_to_list): commas dropped, `(...)*n` and `x*n` unrolled, then
/// split at `|` into stages of E (embedding), t (decoder layer), m (MTP
/// layer) and L (loss). Stage s of the list is virtual stage s / pp of rank
/// s % pp. Checked as Megatron's validate_layer_layout checks it: the stage
/// count a multiple of `pp` and equal to pp x `vp`; E first and L last, once
/// each; `layers` t's and `mtp_layers` m's, every m after every t, all in
/// one stage, the last virtual stage of a rank other than the first.
/// InvalidArgument naming --layer-split and what is wrong.
Result<StageSplit> ParseMegatronLayout(const std::string& layout, int layers, int mtp_layers, int pp, int vp);

/// The layout string of `split`, compressed Megatron's way (a run of equal
/// stages as `(...|)*n`): what `pipeline_model_parallel_layout` takes to
/// build exactly that split. ParseMegatronLayout reads it back.
std::string MegatronLayoutOf(const StageSplit& split);

/// A layout balancing embedding, loss and MTP layers as one decoder layer
/// each (Megatron's account-for convention) over pp x vp stages, for a
/// model whose layers no equal split fits: the units (layers + mtp + 2)
/// dealt as evenly as they go, the stages short of a unit at the end.
Result<StageSplit> BalancedSplit(int layers, int mtp_layers, int pp, int vp);

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
/// for its default, num_layers_in_first/last_pipeline_stage where they do,
/// else a pipeline_model_parallel_layout (never both).
struct MegatronStageLayers {
  std::optional<int> first;  ///< num_layers_in_first_pipeline_stage
  std::optional<int> last;   ///< num_layers_in_last_pipeline_stage
  std::optional<std::string> layout;  ///< pipeline_model_parallel_layout
  bool operator==(const MegatronStageLayers&) const = default;
};

/// The fields under which Megatron builds exactly `split`: the fewest of
/// MegatronSplit's (the default when it is the default) when they do, with
/// any MTP layer on the last stage; otherwise the split's layout
/// (MegatronLayoutOf), which Megatron builds whatever the counts.
/// InvalidArgument naming --layer-split only when the split does not have
/// pp x vp stages.
Result<MegatronStageLayers> MegatronStageLayersOf(const StageSplit& split, int pp, int vp);

/// "default split", "num_layers_in_first_pipeline_stage 15,
/// num_layers_in_last_pipeline_stage 14" or "pipeline_model_parallel_layout
/// Et|(tt|)*30L".
std::string MegatronFieldsText(const MegatronStageLayers& m);

/// The same, without the layout: InvalidArgument naming --layer-split,
/// saying why, for a split the two uneven-pipeline fields cannot give
/// (unequal virtual stages of a rank, unequal middle ranks, an end rank
/// without layers, counts vp does not divide).
Result<MegatronStageLayers> MegatronUnevenFieldsOf(const StageSplit& split, int pp, int vp);

/// The split `rule` (not kAuto) gives `layers` (and `mtp_layers` MTP
/// layers, on the last stage unless a layout places them) over pp x
/// stages_per_rank stages. An explicit list must have one count per stage
/// and sum to the layers; errors name --layer-split (EvenSplit's keep
/// naming --pp/--vp).
Result<StageSplit> SplitLayers(const LayerSplit& rule, int layers, int pp, int stages_per_rank, int mtp_layers = 0);

/// The rules `rule` stands for: for kAuto, even, megatron, megatron with
/// both account-for flags and the balanced layout (BalancedSplit, as a
/// kLayout of `layers` / `mtp_layers` over pp x vp when given, else
/// skipped); else itself.
std::vector<LayerSplit> SplitCandidates(const LayerSplit& rule, int layers = 0, int mtp_layers = 0, int pp = 0,
                                        int vp = 0);

}  // namespace kp

#endif  // KIMI_PLAN_SPECS_STAGE_SPLIT_H_
