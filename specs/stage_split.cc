#include "specs/stage_split.h"

#include <algorithm>
#include <cctype>
#include <numeric>
#include <sstream>

#include "common/text.h"

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
    if (st.mtp == 1) parts.push_back("mtp");
    if (st.mtp > 1) parts.push_back("mtp x" + std::to_string(st.mtp));
    if (st.head) parts.push_back("head");
    if (parts.empty()) parts.push_back("(empty)");
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

// Stages of the given decoder-layer counts, the embedding on the first, the
// MTP layers and the head on the last (where Megatron builds them without a
// layout).
StageSplit FromCounts(const std::vector<int>& counts, int mtp_layers = 0) {
  StageSplit split;
  int layer = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    StageLayers st;
    st.first_layer = layer;
    st.end_layer = layer + counts[s];
    st.embedding = s == 0;
    st.head = s + 1 == counts.size();
    st.mtp = st.head ? mtp_layers : 0;
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

// Decoder layers per stage under account_for_embedding/loss_in_pipeline_split
// (transformer_block.py get_num_layers_to_build): the embedding and the loss
// count as layers of an equal split of layers + 2 over pp x vp stages, and
// the first and last stage build one decoder layer fewer.
Result<std::vector<int>> AccountedStageLayers(int layers, int pp, int vp, bool embedding, bool loss) {
  const int units = layers + (embedding ? 1 : 0) + (loss ? 1 : 0);
  const int stages = pp * vp;
  if (units % stages != 0)
    return MegatronRefuses("with account_for_" + std::string(embedding && loss ? "embedding and loss" : embedding ? "embedding" : "loss") +
                           "_in_pipeline_split splits the " + Str(units) + " layers (" + Str(layers) +
                           " decoder layers" + (embedding ? " + the embedding" : "") + (loss ? " + the loss" : "") +
                           ") equally over pp x vp = " + Str(stages) + " stages, and " + Str(stages) +
                           " does not divide them");
  std::vector<int> counts(stages, units / stages);
  if (embedding) --counts.front();
  if (loss) --counts.back();
  return counts;
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
             " (only a pipeline_model_parallel_layout can)";
  return "";
}

}  // namespace

Result<MegatronStageLayers> MegatronStageLayersOf(const StageSplit& split, int pp, int vp) {
  if (pp < 1 || vp < 1 || split.num_stages() != pp * vp)
    return Status::InvalidArgument(std::string(kField) + Str(split.num_stages()) + " stages, Megatron builds pp x vp = " +
                                   Str(pp * vp));
  // Megatron puts MTP layers on the last stage unless a layout says otherwise.
  const bool mtp_on_last = std::all_of(split.stages.begin(), split.stages.end() - 1,
                                       [](const StageLayers& s) { return s.mtp == 0; });
  if (mtp_on_last)
    if (Result<MegatronStageLayers> fields = MegatronUnevenFieldsOf(split, pp, vp); fields.ok()) return fields;
  MegatronStageLayers m;
  m.layout = MegatronLayoutOf(split);
  return m;
}

std::string MegatronFieldsText(const MegatronStageLayers& m) {
  if (m.layout) return "pipeline_model_parallel_layout " + *m.layout;
  std::string out;
  if (m.first) out += "num_layers_in_first_pipeline_stage " + Str(*m.first);
  if (m.last) out += (out.empty() ? "" : ", ") + std::string("num_layers_in_last_pipeline_stage ") + Str(*m.last);
  return out.empty() ? "default split" : out;
}

Result<MegatronStageLayers> MegatronUnevenFieldsOf(const StageSplit& split, int pp, int vp) {
  const std::vector<int> counts = LayerCounts(split);
  if (pp < 1 || vp < 1 || split.num_stages() != pp * vp)
    return Status::InvalidArgument(std::string(kField) + Str(split.num_stages()) + " stages, Megatron builds pp x vp = " +
                                   Str(pp * vp));
  const std::string why = WhyNotMegatron(counts, pp);
  if (!why.empty()) return MegatronRefuses(why);
  const int layers = std::accumulate(counts.begin(), counts.end(), 0);
  const int first = counts.front() * vp, last = counts[pp - 1] * vp;
  const MegatronStageLayers tries[] = {{std::nullopt, std::nullopt, std::nullopt},
                                       {first, std::nullopt, std::nullopt},
                                       {std::nullopt, last, std::nullopt},
                                       {first, last, std::nullopt}};
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
    case LayerSplitKind::kMegatron:
      return std::string("megatron") + (account_for_embedding ? "+embedding" : "") + (account_for_loss ? "+loss" : "");
    case LayerSplitKind::kAuto: return "auto";
    case LayerSplitKind::kExplicit: return JoinCounts(counts);
    case LayerSplitKind::kLayout: return layout;
  }
  return "?";
}

namespace {

// The layout's text with commas dropped and `(...)*n` and `x*n` unrolled, as
// Megatron's parse_str_to_list does (its regular expressions: innermost
// parentheses first, then one character times n), or why it cannot be.
Result<std::string> UnrollLayout(std::string text) {
  std::string out;
  for (char c : text)
    if (c != ',') out += c;
  // Repeated expansion keeps the total bounded: no layout of a real model
  // has more than a million characters.
  constexpr std::size_t kMaxUnrolled = 1'000'000;
  auto repeat = [&](const std::string& piece, std::size_t count) -> Result<std::string> {
    if (count > kMaxUnrolled || piece.size() * count > kMaxUnrolled)
      return Status::InvalidArgument(std::string(kField) + "the layout unrolls to more than " + Str(kMaxUnrolled) +
                                     " characters");
    std::string r;
    for (std::size_t i = 0; i < count; ++i) r += piece;
    return r;
  };
  auto count_at = [&](std::size_t i, std::size_t* end) -> std::optional<std::size_t> {
    std::size_t j = i;
    while (j < out.size() && std::isdigit(static_cast<unsigned char>(out[j]))) ++j;
    if (j == i || j - i > 7) return std::nullopt;
    *end = j;
    return static_cast<std::size_t>(std::stoul(out.substr(i, j - i)));
  };
  // (...)*n, innermost first.
  for (std::size_t close; (close = out.find(')')) != std::string::npos;) {
    const std::size_t open = out.rfind('(', close);
    if (open == std::string::npos || close == open + 1 || close + 1 >= out.size() || out[close + 1] != '*')
      return Status::InvalidArgument(std::string(kField) + "\"" + QuoteBounded(text) +
                                     "\": a group must be (stages)*N with something inside");
    std::size_t end = 0;
    const std::optional<std::size_t> n = count_at(close + 2, &end);
    if (!n) return Status::InvalidArgument(std::string(kField) + "\"" + QuoteBounded(text) + "\": (...)* needs a count");
    KP_ASSIGN_OR_RETURN(std::string unrolled, repeat(out.substr(open + 1, close - open - 1), *n));
    out = out.substr(0, open) + unrolled + out.substr(end);
  }
  if (out.find('(') != std::string::npos)
    return Status::InvalidArgument(std::string(kField) + "\"" + QuoteBounded(text) + "\": a ( is never closed");
  // x*n.
  for (std::size_t star; (star = out.find('*')) != std::string::npos;) {
    std::size_t end = 0;
    const std::optional<std::size_t> n = count_at(star + 1, &end);
    if (star == 0 || !n)
      return Status::InvalidArgument(std::string(kField) + "\"" + QuoteBounded(text) + "\": * must follow a layer and precede a count");
    KP_ASSIGN_OR_RETURN(std::string unrolled, repeat(out.substr(star - 1, 1), *n));
    out = out.substr(0, star - 1) + unrolled + out.substr(end);
  }
  return out;
}

// Every character of an unrolled layout is a piece or a stage separator.
Status CheckLayoutCharacters(const std::string& unrolled) {
  for (char c : unrolled)
    if (c != 'E' && c != 't' && c != 'm' && c != 'L' && c != '|')
      return Status::InvalidArgument(std::string(kField) + "'" + QuoteBounded(std::string(1, c)) +
                                     "' is not a layer of a layout (E embedding, t decoder layer, m MTP layer, L "
                                     "loss, | between stages); or give even, megatron, auto or layers per stage");
  return Status::Ok();
}

bool LooksLikeLayout(const std::string& text) {
  return text.find_first_of("EtmL|()*") != std::string::npos;
}

}  // namespace

Result<StageSplit> ParseMegatronLayout(const std::string& layout, int layers, int mtp_layers, int pp, int vp) {
  KP_ASSIGN_OR_RETURN(const std::string unrolled, UnrollLayout(layout));
  KP_RETURN_IF_ERROR(CheckLayoutCharacters(unrolled));
  std::vector<std::string> stages(1);
  for (char c : unrolled) {
    if (c == '|') stages.emplace_back();
    else stages.back() += c;
  }
  const int count = static_cast<int>(stages.size());
  if (pp < 1 || count % pp != 0)
    return Status::InvalidArgument(std::string(kField) + "the layout has " + Str(count) +
                                   " stages, which pp " + Str(pp) + " does not divide");
  if (count != pp * vp)
    return Status::InvalidArgument(std::string(kField) + "the layout has " + Str(count) + " stages, " + Str(count / pp) +
                                   " per pipeline rank; give --vp " + Str(count / pp) + " (the plan has " + Str(vp) + ")");
  const std::string flat = [&] {
    std::string f;
    for (const std::string& st : stages) f += st;
    return f;
  }();
  if (flat.empty() || flat.front() != 'E')
    return Status::InvalidArgument(std::string(kField) + "the embedding (E) must come first, in stage 0");
  if (flat.back() != 'L') return Status::InvalidArgument(std::string(kField) + "the loss (L) must come last, in the last stage");
  auto occurrences = [&](char c) { return static_cast<int>(std::count(flat.begin(), flat.end(), c)); };
  if (occurrences('E') != 1) return Status::InvalidArgument(std::string(kField) + "the embedding (E) appears " + Str(occurrences('E')) + " times; it must appear once");
  if (occurrences('L') != 1) return Status::InvalidArgument(std::string(kField) + "the loss (L) appears " + Str(occurrences('L')) + " times; it must appear once");
  if (occurrences('t') != layers)
    return Status::InvalidArgument(std::string(kField) + "the layout places " + Str(occurrences('t')) +
                                   " decoder layers (t), the model has " + Str(layers));
  if (occurrences('m') != mtp_layers)
    return Status::InvalidArgument(std::string(kField) + "the layout places " + Str(occurrences('m')) +
                                   " MTP layers (m), the model has " + Str(mtp_layers));
  if (mtp_layers > 0 && flat.find('t', flat.find('m')) != std::string::npos)
    return Status::InvalidArgument(std::string(kField) + "every decoder layer (t) must come before the MTP layers (m)");
  StageSplit split;
  int layer = 0;
  for (int s = 0; s < count; ++s) {
    const std::string& text = stages[s];
    StageLayers st;
    st.first_layer = layer;
    st.end_layer = layer + static_cast<int>(std::count(text.begin(), text.end(), 't'));
    st.embedding = text.find('E') != std::string::npos;
    st.head = text.find('L') != std::string::npos;
    st.mtp = static_cast<int>(std::count(text.begin(), text.end(), 'm'));
    if (st.mtp > 0 && st.mtp != mtp_layers)
      return Status::InvalidArgument(std::string(kField) + "all MTP layers (m) must be in one stage");
    if (st.mtp > 0 && (s % pp == 0 || s / pp != vp - 1))
      return Status::InvalidArgument(std::string(kField) + "the MTP layers (m) must be in the last virtual stage of a "
                                     "pipeline rank other than the first (stage " + Str(s) + " is not)");
    layer = st.end_layer;
    split.stages.push_back(st);
  }
  return split;
}

namespace {

// One stage in layout characters.
std::string StageText(const StageLayers& st) {
  return std::string(st.embedding ? "E" : "") + std::string(st.layer_count(), 't') + std::string(st.mtp, 'm') +
         (st.head ? "L" : "");
}

}  // namespace

std::string MegatronLayoutOf(const StageSplit& split) {
  std::string out;
  const int n = split.num_stages();
  for (int s = 0; s < n;) {
    const std::string text = StageText(split.stages[s]);
    int run = 1;
    while (s + run < n && StageText(split.stages[s + run]) == text) ++run;
    const bool last = s + run == n;
    if (run >= 2 && !text.empty()) {
      // The group carries each stage's separator; at the end the last stage
      // stands alone, so that no empty stage follows.
      out += last ? "(" + text + "|)*" + Str(run - 1) + text : "(" + text + "|)*" + Str(run);
    } else {
      for (int k = 0; k < run; ++k) out += text + (s + k + 1 < n ? "|" : "");
    }
    s += run;
  }
  return out;
}

Result<StageSplit> BalancedSplit(int layers, int mtp_layers, int pp, int vp) {
  const int stages = pp * vp;
  if (stages < 1) return Status::InvalidArgument("--pp/--vp: must be at least 1");
  // Units: the embedding, each decoder and MTP layer, the loss. Stage s
  // gets base or base + 1 units, the extra ones first; then the embedding
  // takes a unit of stage 0, and the MTP layers and the loss of the last.
  const int units = layers + mtp_layers + 2;
  if (units < stages)
    return Status::InvalidArgument(std::string(kField) + Str(stages) + " stages exceed the " + Str(units) +
                                   " units of the model (embedding, " + Str(layers) + " layers, " +
                                   (mtp_layers ? Str(mtp_layers) + " MTP layers, " : "") + "loss)");
  std::vector<int> counts(stages, units / stages);
  for (int s = 0; s < units % stages; ++s) ++counts[s];
  --counts.front();
  counts.back() -= mtp_layers + 1;
  // A last stage too small for its MTP layers and loss gives decoder
  // layers back to the stages before it.
  for (int s = stages - 1; counts[s] < 0 && s > 0; --s) {
    counts[s - 1] += counts[s];
    counts[s] = 0;
  }
  if (counts.front() < 0) return Status::InvalidArgument(std::string(kField) + "too many stages for the model");
  return FromCounts(counts, mtp_layers);
}

Result<LayerSplit> ParseLayerSplit(const std::string& text) {
  LayerSplit rule;
  if (text == "even") return rule;
  if (text == "auto") {
    rule.kind = LayerSplitKind::kAuto;
    return rule;
  }
  if (text.rfind("megatron", 0) == 0) {
    rule.kind = LayerSplitKind::kMegatron;
    std::stringstream ss(text.substr(8));
    std::string flag;
    std::getline(ss, flag, '+');  // what precedes the first '+': empty
    if (!flag.empty()) return Status::InvalidArgument(std::string(kField) + "give megatron, megatron+embedding, megatron+loss or megatron+embedding+loss");
    while (std::getline(ss, flag, '+')) {
      if (flag == "embedding" && !rule.account_for_embedding) rule.account_for_embedding = true;
      else if (flag == "loss" && !rule.account_for_loss) rule.account_for_loss = true;
      else return Status::InvalidArgument(std::string(kField) + "\"" + QuoteBounded(flag) +
                                          "\" is not embedding or loss (megatron+embedding+loss: Megatron's account_for_*_in_pipeline_split)");
    }
    return rule;
  }
  if (LooksLikeLayout(text)) {
    KP_ASSIGN_OR_RETURN(const std::string unrolled, UnrollLayout(text));
    KP_RETURN_IF_ERROR(CheckLayoutCharacters(unrolled));
    rule.kind = LayerSplitKind::kLayout;
    rule.layout = text;
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

Result<StageSplit> SplitLayers(const LayerSplit& rule, int layers, int pp, int stages_per_rank, int mtp_layers) {
  const int stages = pp * stages_per_rank;
  auto with_mtp = [&](Result<StageSplit> split) -> Result<StageSplit> {
    if (split.ok() && mtp_layers > 0) split.value().stages.back().mtp = mtp_layers;
    return split;
  };
  switch (rule.kind) {
    case LayerSplitKind::kEven: return with_mtp(EvenSplit(layers, stages));
    case LayerSplitKind::kMegatron:
      if (rule.account_for_embedding || rule.account_for_loss) {
        if (pp < 1 || stages_per_rank < 1) return Status::InvalidArgument("--pp/--vp: must be at least 1");
        KP_ASSIGN_OR_RETURN(std::vector<int> counts, AccountedStageLayers(layers, pp, stages_per_rank,
                                                                          rule.account_for_embedding, rule.account_for_loss));
        return FromCounts(counts, mtp_layers);
      }
      return with_mtp(MegatronSplit(layers, pp, stages_per_rank));
    case LayerSplitKind::kLayout: return ParseMegatronLayout(rule.layout, layers, mtp_layers, pp, stages_per_rank);
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
  return FromCounts(rule.counts, mtp_layers);
}

std::vector<LayerSplit> SplitCandidates(const LayerSplit& rule, int layers, int mtp_layers, int pp, int vp) {
  if (rule.kind != LayerSplitKind::kAuto) return {rule};
  std::vector<LayerSplit> out = {LayerSplit{LayerSplitKind::kEven, {}}, LayerSplit{LayerSplitKind::kMegatron, {}}};
  LayerSplit accounted{LayerSplitKind::kMegatron, {}};
  accounted.account_for_embedding = accounted.account_for_loss = true;
  out.push_back(accounted);
  if (layers > 0 && pp > 0 && vp > 0)
    if (Result<StageSplit> balanced = BalancedSplit(layers, mtp_layers, pp, vp); balanced.ok()) {
      LayerSplit layout{LayerSplitKind::kLayout, {}};
      layout.layout = MegatronLayoutOf(*balanced);
      out.push_back(layout);
    }
  return out;
}

}  // namespace kp
