#include "specs/stage_split.h"

#include <numeric>
#include <sstream>

namespace kp {

int StageSplit::StageOfLayer(int layer) const {
  for (int s = 0; s < num_stages(); ++s)
    if (layer >= stages[s].first_layer && layer < stages[s].end_layer) return s;
  return -1;
}

std::string StageSplit::ToString() const {
  std::ostringstream out;
  for (int s = 0; s < num_stages(); ++s) {
    const StageLayers& st = stages[s];
    if (s) out << " | ";
    std::vector<std::string> parts;
    if (st.embedding) parts.push_back("emb");
    if (st.layer_count() == 1) parts.push_back(std::to_string(st.first_layer));
    if (st.layer_count() > 1)
      parts.push_back(std::to_string(st.first_layer) + "-" + std::to_string(st.end_layer - 1));
    if (st.head) parts.push_back("head");
    for (size_t i = 0; i < parts.size(); ++i) out << (i ? "," : "") << parts[i];
  }
  return out.str();
}

namespace {

// The comma-separated non-negative integers of `text`; nullopt, with the
// offending item in *bad, when one is not.
std::optional<std::vector<int>> CommaSeparatedCounts(const std::string& text, std::string* bad) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t pos = 0;
    int v = -1;
    try {
      v = std::stoi(item, &pos);
    } catch (...) {
      pos = 0;
    }
    if (item.empty() || pos != item.size() || v < 0) {
      *bad = item;
      return std::nullopt;
    }
    out.push_back(v);
  }
  return out;
}

StageSplit FromCounts(const std::vector<int>& counts) {
  StageSplit split;
  int layer = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    StageLayers st;
    st.first_layer = layer;
    st.end_layer = layer + counts[s];
    st.embedding = s == 0;
    st.head = s + 1 == counts.size();
    layer = st.end_layer;
    split.stages.push_back(st);
  }
  return split;
}

}  // namespace

Result<StageSplit> EvenSplit(int layers, int stages) {
  if (stages < 1) return Status::InvalidArgument("--pp: the number of stages must be at least 1");
  if (stages == 1) return FromCounts({layers});
  const int units = layers + 2;
  if (stages > units)
    return Status::InvalidArgument("--pp/--vp: " + std::to_string(stages) + " stages exceed the " +
                                   std::to_string(units) + " units (embedding + " +
                                   std::to_string(layers) + " layers + head)");
  const int per = units / stages, extra = units % stages;
  std::vector<int> counts;
  int remaining = layers;
  for (int s = 0; s < stages; ++s) {
    int take = per + (s < extra ? 1 : 0);
    if (s == 0 || s == stages - 1) take -= 1;
    take = std::min(take, remaining);
    remaining -= take;
    counts.push_back(take);
  }
  for (int s = 1; s + 1 < stages; ++s)
    if (counts[s] == 0)
      return Status::InvalidArgument("--pp/--vp: the even split of " + std::to_string(layers) +
                                     " layers into " + std::to_string(stages) + " stages leaves stage " +
                                     std::to_string(s) + " empty; give --split explicitly");
  return FromCounts(counts);
}

Result<StageSplit> ParseSplit(const std::string& text, int layers, const std::string& field) {
  std::string bad;
  const std::optional<std::vector<int>> parsed = CommaSeparatedCounts(text, &bad);
  if (!parsed)
    return Status::InvalidArgument(field + ": \"" + bad + "\" is not a layer count (a non-negative integer)");
  const std::vector<int>& counts = *parsed;
  if (counts.empty()) return Status::InvalidArgument(field + ": give one layer count per stage");
  int sum = 0;
  for (int c : counts) sum += c;
  if (sum != layers)
    return Status::InvalidArgument(field + ": the counts sum to " + std::to_string(sum) +
                                   " layers, the model has " + std::to_string(layers));
  for (size_t s = 1; s + 1 < counts.size(); ++s)
    if (counts[s] == 0)
      return Status::InvalidArgument(field + ": stage " + std::to_string(s) +
                                     " holds nothing (only the first and last stage may have no layer)");
  return FromCounts(counts);
}

std::vector<int> LayerCounts(const StageSplit& split) {
  std::vector<int> counts;
  for (const StageLayers& st : split.stages) counts.push_back(st.layer_count());
  return counts;
}

namespace {

constexpr const char* kField = "--layer-split: ";

std::string Str(int v) { return std::to_string(v); }

std::string JoinCounts(const std::vector<int>& counts) {
  std::string out;
  for (size_t i = 0; i < counts.size(); ++i) out += (i ? "," : "") + Str(counts[i]);
  return out;
}

Status MegatronRefuses(const std::string& why) {
  return Status::InvalidArgument(std::string(kField) + "Megatron-LM " + why);
}

// TransformerConfig.__post_init__'s checks of one uneven end rank.
Status CheckEndRank(const char* field, int layers, int vp) {
  if (layers <= 0) return MegatronRefuses(std::string("needs ") + field + " >= 1, got " + Str(layers));
  if (layers % vp != 0)
    return MegatronRefuses(std::string("needs ") + field + " = " + Str(layers) + " divisible by vp " + Str(vp));
  return Status::Ok();
}

// Layers on each pipeline rank (transformer_block.py get_num_layers_to_build).
Result<std::vector<int>> MegatronRankLayers(int layers, int pp, int vp, std::optional<int> first,
                                            std::optional<int> last) {
  if (!first && !last) {
    if (layers % pp != 0)
      return MegatronRefuses("puts num_layers / pp on every rank, and pp " + Str(pp) + " does not divide the " +
                             Str(layers) + " layers");
    return std::vector<int>(pp, layers / pp);
  }
  if (pp < 2) return MegatronRefuses("takes num_layers_in_first/last_pipeline_stage only with pp >= 2");
  int middle_layers = layers, middle_ranks = pp;
  if (first) KP_RETURN_IF_ERROR(CheckEndRank("num_layers_in_first_pipeline_stage", *first, vp));
  if (last) KP_RETURN_IF_ERROR(CheckEndRank("num_layers_in_last_pipeline_stage", *last, vp));
  middle_layers -= first.value_or(0) + last.value_or(0);
  middle_ranks -= (first ? 1 : 0) + (last ? 1 : 0);
  if ((middle_layers != 0) != (middle_ranks != 0) || middle_layers < 0 ||
      (middle_ranks > 0 && middle_layers % middle_ranks != 0))
    return MegatronRefuses("needs the " + Str(middle_layers) + " layers between the first and last stage to divide "
                           "equally over the " + Str(middle_ranks) + " middle ranks");
  std::vector<int> ranks(pp, middle_ranks > 0 ? middle_layers / middle_ranks : 0);
  if (first) ranks.front() = *first;
  if (last) ranks.back() = *last;
  return ranks;
}

}  // namespace

Result<StageSplit> MegatronSplit(int layers, int pp, int vp, std::optional<int> first, std::optional<int> last) {
  if (pp < 1 || vp < 1) return Status::InvalidArgument("--pp/--vp: must be at least 1");
  if (vp > 1 && pp < 2) return MegatronRefuses("interleaves virtual stages only with pp >= 2");
  KP_ASSIGN_OR_RETURN(std::vector<int> ranks, MegatronRankLayers(layers, pp, vp, first, last));
  std::vector<int> counts(static_cast<size_t>(pp) * vp);
  for (int r = 0; r < pp; ++r) {
    if (ranks[r] % vp != 0)
      return MegatronRefuses("splits a rank's layers equally over its virtual stages, and vp " + Str(vp) +
                             " does not divide the " + Str(ranks[r]) + " layers of rank " + Str(r));
    for (int j = 0; j < vp; ++j) counts[static_cast<size_t>(j) * pp + r] = ranks[r] / vp;
  }
  return FromCounts(counts);
}

namespace {

// Why Megatron's two end-rank fields cannot give `counts`, or empty when
// only divisibility stands in the way.
std::string WhyNotMegatron(const std::vector<int>& counts, int pp) {
  std::vector<int> ranks(pp, 0);
  for (size_t s = 0; s < counts.size(); ++s) {
    const int r = static_cast<int>(s % pp);
    if (counts[s] != counts[r])
      return "gives every virtual stage of a rank the same layers, and rank " + Str(r) + " has " + Str(counts[r]) +
             " and " + Str(counts[s]);
    ranks[r] += counts[s];
  }
  for (int r = 2; r + 1 < pp; ++r)
    if (ranks[r] != ranks[1])
      return "gives every rank but the first and the last the same layers, and rank 1 has " + Str(ranks[1]) +
             ", rank " + Str(r) + " " + Str(ranks[r]) +
             " (only a pipeline_model_parallel_layout could, which kimi-plan does not emit)";
  return "";
}

}  // namespace

Result<MegatronStageLayers> MegatronStageLayersOf(const StageSplit& split, int pp, int vp) {
  const std::vector<int> counts = LayerCounts(split);
  if (pp < 1 || vp < 1 || split.num_stages() != pp * vp)
    return Status::InvalidArgument(std::string(kField) + Str(split.num_stages()) + " stages, Megatron builds pp x vp = " +
                                   Str(pp * vp));
  const std::string why = WhyNotMegatron(counts, pp);
  if (!why.empty()) return MegatronRefuses(why);
  const int layers = std::accumulate(counts.begin(), counts.end(), 0);
  const int first = counts.front() * vp, last = counts[pp - 1] * vp;
  const MegatronStageLayers tries[] = {{}, {first, std::nullopt}, {std::nullopt, last}, {first, last}};
  Status refusal = Status::Ok();
  for (const MegatronStageLayers& t : tries) {
    Result<StageSplit> s = MegatronSplit(layers, pp, vp, t.first, t.last);
    if (s.ok() && LayerCounts(*s) == counts) return t;
    if (!s.ok()) refusal = s.status();
  }
  if (!refusal.ok()) return refusal;
  return MegatronRefuses("cannot build the split " + JoinCounts(counts));
}

std::string LayerSplit::ToString() const {
  switch (kind) {
    case LayerSplitKind::kEven: return "even";
    case LayerSplitKind::kMegatron: return "megatron";
    case LayerSplitKind::kAuto: return "auto";
    case LayerSplitKind::kExplicit: return JoinCounts(counts);
  }
  return "?";
}

Result<LayerSplit> ParseLayerSplit(const std::string& text) {
  LayerSplit rule;
  if (text == "even") return rule;
  if (text == "megatron" || text == "auto") {
    rule.kind = text == "auto" ? LayerSplitKind::kAuto : LayerSplitKind::kMegatron;
    return rule;
  }
  rule.kind = LayerSplitKind::kExplicit;
  std::string bad;
  const std::optional<std::vector<int>> counts = CommaSeparatedCounts(text, &bad);
  if (!counts)
    return Status::InvalidArgument(std::string(kField) + "\"" + bad +
                                   "\" is not a layer count; give even, megatron, auto or layers per stage (2,3,3,2)");
  for (int v : *counts) {
    if (v == 0)
      return Status::InvalidArgument(std::string(kField) + "stage " + Str(static_cast<int>(rule.counts.size())) +
                                     " has no layers (every stage needs at least one)");
    rule.counts.push_back(v);
  }
  if (rule.counts.empty() || text.back() == ',')
    return Status::InvalidArgument(std::string(kField) + "give even, megatron, auto or layers per stage (2,3,3,2)");
  return rule;
}

Result<StageSplit> SplitLayers(const LayerSplit& rule, int layers, int pp, int stages_per_rank) {
  const int stages = pp * stages_per_rank;
  switch (rule.kind) {
    case LayerSplitKind::kEven: return EvenSplit(layers, stages);
    case LayerSplitKind::kMegatron: return MegatronSplit(layers, pp, stages_per_rank);
    case LayerSplitKind::kAuto: return Status::Internal("SplitLayers: resolve auto with SplitCandidates");
    case LayerSplitKind::kExplicit: break;
  }
  if (static_cast<int>(rule.counts.size()) != stages)
    return Status::InvalidArgument(std::string(kField) + Str(static_cast<int>(rule.counts.size())) +
                                   " counts, the plan has " + Str(stages) + " stages (pp " + Str(pp) + " x " +
                                   Str(stages_per_rank) + " per rank)");
  const int sum = std::accumulate(rule.counts.begin(), rule.counts.end(), 0);
  if (sum != layers)
    return Status::InvalidArgument(std::string(kField) + "the counts sum to " + Str(sum) + " layers, the model has " +
                                   Str(layers));
  return FromCounts(rule.counts);
}

std::vector<LayerSplit> SplitCandidates(const LayerSplit& rule) {
  if (rule.kind != LayerSplitKind::kAuto) return {rule};
  return {LayerSplit{LayerSplitKind::kEven, {}}, LayerSplit{LayerSplitKind::kMegatron, {}}};
}

}  // namespace kp
