#include "schedules/attnres_transport.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "common/limits.h"
#include "common/table.h"

namespace kp {

namespace {

/// Stack entries by index (0 = e), in stack order.
using Entries = std::vector<int>;

/// The tables by entry index; names are put on at the end so the routing
/// logic never compares strings.
struct IndexTables {
  std::vector<Entries> committed, held_before, naive_in, cached_in, deposits;
  std::vector<std::vector<std::pair<int, Entries>>> collects;
};

Status ValidateSplit(int layers, const StageSplit& split) {
  if (split.stages.empty()) return Status::InvalidArgument("--split: the split has no stages");
  int next = 0;
  for (int s = 0; s < split.num_stages(); ++s) {
    const StageLayers& st = split.stages[s];
    if (st.first_layer != next || st.end_layer < st.first_layer)
      return Status::InvalidArgument("--split: stage " + std::to_string(s) + " holds layers [" +
                                     std::to_string(st.first_layer) + ", " + std::to_string(st.end_layer) +
                                     "), expected to start at layer " + std::to_string(next));
    next = st.end_layer;
  }
  if (next != layers)
    return Status::InvalidArgument("--split: the split holds " + std::to_string(next) + " layers, the model has " +
                                   std::to_string(layers));
  return Status::Ok();
}

Status ValidateInputs(int layers, int block_size, const StageSplit& split, int pp) {
  if (block_size < 1)
    return Status::InvalidArgument("--block-size: " + std::to_string(block_size) +
                                   " is not a block size (at least 1 layer)");
  KP_RETURN_IF_ERROR(ValidateSplit(layers, split));
  if (pp < 1) return Status::InvalidArgument("--pp: " + std::to_string(pp) + " is not a pipeline degree (at least 1)");
  if (split.num_stages() % pp != 0)
    return Status::InvalidArgument("--pp: " + std::to_string(pp) + " does not divide the " +
                                   std::to_string(split.num_stages()) + " stages of the split");
  // The tables hold, per stage, the blocks it sees; bounded before they are built.
  const double cells = (double(split.num_stages()) + pp) * (double(layers) / block_size + 2);
  if (cells > double(limits::kMaxAttnResCells))
    return Status::InvalidArgument("--layers: " + std::to_string(layers) + " layers in blocks of " +
                                   std::to_string(block_size) + " over " + std::to_string(split.num_stages()) +
                                   " stages make " + std::to_string(static_cast<long long>(cells)) +
                                   " table cells, more than the " + std::to_string(limits::kMaxAttnResCells) +
                                   " one simulation may hold (docs/limits.md)");
  return Status::Ok();
}

// The rank cache lets a stage read what its rank's earlier virtual stages
// saw; that is only the blocks committed at stages <= s - pp when the
// previous virtual stage on the rank is exactly s - pp, i.e. loop style.
Status ValidateLoopStyle(int pp, int num_stages, const StageRankMap& map) {
  const int named = static_cast<int>(map.rank_of_stage.size());
  if (named != num_stages)
    return Status::InvalidArgument("--schedule: " + map.schedule + " places " + std::to_string(named) +
                                   " stages, the split has " + std::to_string(num_stages));
  for (int s = 0; s < num_stages; ++s)
    if (map.rank_of_stage[s] != s % pp)
      return Status::InvalidArgument("--schedule: " + map.schedule + " puts stage " + std::to_string(s) +
                                     " on rank " + std::to_string(map.rank_of_stage[s]) +
                                     "; the attention-residual rank cache needs stage s on rank s % " +
                                     std::to_string(pp) + " (rank " + std::to_string(s % pp) + ")");
  return Status::Ok();
}

int CeilDiv(int a, int b) { return (a + b - 1) / b; }

/// Entry k joins the stack at layer k * block_size, the first layer of block k.
Entries CommittedBy(const StageLayers& st, int block_size) {
  Entries out;
  for (int k = CeilDiv(st.first_layer, block_size); k * block_size < st.end_layer; ++k) out.push_back(k);
  return out;
}

/// Every layer attends over all earlier blocks and the head's aggregation
/// reads the whole stack; a stage with neither (only the embedding, or an
/// empty relay stage) reads nothing and so deposits no gradient.
bool ReadsStack(const StageLayers& st) { return st.layer_count() > 0 || st.head; }

Entries Held(const std::vector<bool>& store) {
  Entries out;
  for (int e = 0; e < static_cast<int>(store.size()); ++e)
    if (store[e]) out.push_back(e);
  return out;
}

// One micro-batch's forward in stage order. A hop carries the whole stack
// (naive) or the part the receiving rank's cache lacks; the receiver then
// caches what it received and what it commits, remembering which stage put
// each entry on the rank, since that stage collects the entry's deposits.
IndexTables Simulate(int block_size, const StageSplit& split, int pp, int n_entries) {
  const int n = split.num_stages();
  IndexTables t;
  t.committed.resize(n), t.held_before.resize(n), t.naive_in.resize(n), t.cached_in.resize(n);
  t.deposits.resize(n), t.collects.resize(n);
  std::vector<std::vector<bool>> store(pp, std::vector<bool>(n_entries, false));
  std::vector<std::vector<int>> putter(pp, std::vector<int>(n_entries, -1));
  Entries stack;
  for (int s = 0; s < n; ++s) {
    const int r = s % pp;
    t.held_before[s] = Held(store[r]);
    if (s > 0) t.naive_in[s] = stack;
    for (int e : stack)
      if (s > 0 && !store[r][e]) t.cached_in[s].push_back(e);
    t.committed[s] = CommittedBy(split.stages[s], block_size);
    for (int e : t.committed[s]) stack.push_back(e);
    for (const Entries* put : {&t.cached_in[s], &t.committed[s]})
      for (int e : *put) store[r][e] = true, putter[r][e] = s;
    if (ReadsStack(split.stages[s])) t.deposits[s] = t.held_before[s];
  }
  // Deposits of stage u go to the stage that put the entry on u's rank;
  // visiting u in increasing order keeps each stage's collects by stage.
  for (int u = 0; u < n; ++u)
    for (int e : t.deposits[u]) {
      auto& into = t.collects[putter[u % pp][e]];
      if (into.empty() || into.back().first != u) into.push_back({u, {}});
      into.back().second.push_back(e);
    }
  return t;
}

// Option 1: the producer sends an entry once to every other rank that has a
// later stage reading it.
int Option1Entries(const StageSplit& split, int pp, const IndexTables& t) {
  int total = 0;
  for (int c = 0; c < split.num_stages(); ++c)
    for (size_t i = 0; i < t.committed[c].size(); ++i) {
      std::set<int> ranks;
      for (int s = c + 1; s < split.num_stages(); ++s)
        if (s % pp != c % pp && ReadsStack(split.stages[s])) ranks.insert(s % pp);
      total += static_cast<int>(ranks.size());
    }
  return total;
}

std::vector<std::string> Names(const Entries& entries, int block_size, const std::string& prefix = "") {
  std::vector<std::string> out;
  for (int e : entries) out.push_back(prefix + AttnResEntryName(e, block_size));
  return out;
}

AttnResStageRow NamedRow(int s, int pp, int block_size, const StageSplit& split, const IndexTables& t) {
  const int last = split.num_stages() - 1;
  AttnResStageRow row;
  row.stage = s, row.rank = s % pp, row.virtual_stage = s / pp, row.layers = split.stages[s];
  row.committed = Names(t.committed[s], block_size);
  row.held_before = Names(t.held_before[s], block_size);
  row.naive_fwd = Names(t.naive_in[s], block_size);
  row.cached_fwd = Names(t.cached_in[s], block_size);
  if (s < last) row.naive_bwd = Names(t.naive_in[s + 1], block_size, "d");
  if (s < last) row.cached_bwd = Names(t.cached_in[s + 1], block_size, "d");
  row.deposits = Names(t.deposits[s], block_size, "d");
  for (const auto& [from, entries] : t.collects[s]) row.collects.push_back({from, Names(entries, block_size, "d")});
  return row;
}

int Size(const std::vector<std::string>& v) { return static_cast<int>(v.size()); }

void Total(AttnResTransport& out) {
  for (const AttnResStageRow& r : out.stages) {
    out.naive_entries += Size(r.naive_fwd);
    out.cached_entries += Size(r.cached_fwd);
    out.naive_bwd_entries += Size(r.naive_bwd);
    out.cached_bwd_entries += Size(r.cached_bwd);
    out.cached_peak_per_hop = std::max(out.cached_peak_per_hop, Size(r.cached_fwd));
    out.option2_peak_per_hop = std::max(out.option2_peak_per_hop, Size(r.naive_fwd));
  }
}

}  // namespace

std::string AttnResEntryName(int entry, int block_size) {
  return entry == 0 ? "e" : "x" + std::to_string(entry * block_size);
}

Result<AttnResTransport> ComputeAttnResTransport(int layers, int block_size, const StageSplit& split, int pp) {
  KP_RETURN_IF_ERROR(ValidateInputs(layers, block_size, split, pp));
  AttnResTransport out;
  out.layers = layers, out.block_size = block_size, out.pp = pp, out.vp = split.num_stages() / pp;
  out.stack_entries = CeilDiv(layers, block_size);
  const IndexTables t = Simulate(block_size, split, pp, out.stack_entries);
  for (int s = 0; s < split.num_stages(); ++s) out.stages.push_back(NamedRow(s, pp, block_size, split, t));
  Total(out);
  out.option1_entries = Option1Entries(split, pp, t);
  return out;
}

Result<AttnResTransport> ComputeAttnResTransport(int layers, int block_size, const StageSplit& split, int pp,
                                                 const StageRankMap& map) {
  KP_RETURN_IF_ERROR(ValidateInputs(layers, block_size, split, pp));
  KP_RETURN_IF_ERROR(ValidateLoopStyle(pp, split.num_stages(), map));
  return ComputeAttnResTransport(layers, block_size, split, pp);
}

int HopEntries(const AttnResTransport& t, int from_stage, bool cache) {
  const int into = from_stage + 1;
  if (from_stage < 0 || into >= static_cast<int>(t.stages.size())) return 0;
  return Size(cache ? t.stages[into].cached_fwd : t.stages[into].naive_fwd);
}

Bytes HopBytes(const AttnResTransport& t, int from_stage, bool cache, Bytes hidden_state_bytes, Bytes entry_bytes) {
  if (from_stage < 0 || from_stage + 1 >= static_cast<int>(t.stages.size())) return Bytes(0);
  return hidden_state_bytes + entry_bytes * HopEntries(t, from_stage, cache);
}

nlohmann::json ToJson(const AttnResTransport& t) {
  nlohmann::json stages = nlohmann::json::array();
  for (const AttnResStageRow& r : t.stages) {
    nlohmann::json collects = nlohmann::json::array();
    for (const auto& [from, entries] : r.collects) collects.push_back({{"stage", from}, {"entries", entries}});
    stages.push_back({{"stage", r.stage}, {"rank", r.rank}, {"virtual_stage", r.virtual_stage},
                      {"first_layer", r.layers.first_layer}, {"end_layer", r.layers.end_layer},
                      {"embedding", r.layers.embedding}, {"head", r.layers.head},
                      {"committed", r.committed}, {"held_before", r.held_before},
                      {"naive_fwd", r.naive_fwd}, {"cached_fwd", r.cached_fwd},
                      {"naive_bwd", r.naive_bwd}, {"cached_bwd", r.cached_bwd},
                      {"deposits", r.deposits}, {"collects", collects}});
  }
  return {{"layers", t.layers}, {"block_size", t.block_size}, {"pp", t.pp}, {"vp", t.vp},
          {"stack_entries", t.stack_entries}, {"naive_entries", t.naive_entries},
          {"cached_entries", t.cached_entries}, {"naive_bwd_entries", t.naive_bwd_entries},
          {"cached_bwd_entries", t.cached_bwd_entries}, {"cached_peak_per_hop", t.cached_peak_per_hop},
          {"option1_entries", t.option1_entries}, {"option2_entries", t.naive_entries},
          {"option2_peak_per_hop", t.option2_peak_per_hop}, {"stages", stages}};
}

// ---------------------------------------------------------------- tables

namespace {

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : "") + parts[i];
  return out;
}

std::string Bracketed(const std::vector<std::string>& entries) { return "[" + Join(entries) + "]"; }

std::string BracketedOrDash(const std::vector<std::string>& entries) {
  return entries.empty() ? "-" : Bracketed(entries);
}

std::string StageLabel(const AttnResStageRow& r) {
  return "s" + std::to_string(r.stage) + " (r" + std::to_string(r.rank) + ", v" + std::to_string(r.virtual_stage) +
         ")";
}

/// "emb, 0-1", "7, head", "head".
std::string LayersCell(const StageLayers& st) {
  std::vector<std::string> parts;
  if (st.embedding) parts.push_back("emb");
  if (st.layer_count() == 1) parts.push_back(std::to_string(st.first_layer));
  if (st.layer_count() > 1) parts.push_back(std::to_string(st.first_layer) + "-" + std::to_string(st.end_layer - 1));
  if (st.head) parts.push_back("head");
  return parts.empty() ? "-" : Join(parts);
}

// An empty forward payload is still posted (a 0-byte send / recv); an
// empty backward payload needs no gradient, so nothing is sent.
std::string ForwardHopCell(const AttnResStageRow& r, const std::vector<std::string>& entries) {
  if (r.stage == 0) return "-";
  const std::string hop = "s" + std::to_string(r.stage - 1) + " -> " + Bracketed(entries);
  return entries.empty() ? hop + " (empty payload)" : hop;
}

std::string BackwardHopCell(const AttnResStageRow& r, bool last, const std::vector<std::string>& entries) {
  if (last) return "-";
  if (entries.empty()) return "no op (empty payload)";
  return "s" + std::to_string(r.stage + 1) + " -> " + Bracketed(entries);
}

std::string CollectsCell(const AttnResStageRow& r) {
  std::vector<std::string> parts;
  for (const auto& [from, entries] : r.collects)
    parts.push_back("s" + std::to_string(from) + " stored: " + Bracketed(entries));
  return parts.empty() ? "-" : Join(parts);
}

}  // namespace

std::vector<std::string> ForwardTableHeader() {
  return {"global stage (rank, virtual)", "layers", "Block AttnRes stored stack", "PP Comm, fwd (no cache)",
          "PP Comm, fwd (cache)", "already cached"};
}

std::vector<std::vector<std::string>> ForwardTableCells(const AttnResTransport& t) {
  std::vector<std::vector<std::string>> rows;
  for (const AttnResStageRow& r : t.stages)
    rows.push_back({StageLabel(r), LayersCell(r.layers), r.committed.empty() ? "-" : Join(r.committed),
                    ForwardHopCell(r, r.naive_fwd), ForwardHopCell(r, r.cached_fwd), BracketedOrDash(r.held_before)});
  return rows;
}

std::vector<std::string> BackwardTableHeader() {
  return {"global stage (rank, virtual)", "PP Comm, bwd (no cache)", "PP Comm, bwd (cache)",
          "deposits into the rank cache", "collects from the rank cache"};
}

std::vector<std::vector<std::string>> BackwardTableCells(const AttnResTransport& t) {
  std::vector<std::vector<std::string>> rows;
  for (auto it = t.stages.rbegin(); it != t.stages.rend(); ++it) {
    const bool last = it == t.stages.rbegin();
    rows.push_back({StageLabel(*it), BackwardHopCell(*it, last, it->naive_bwd),
                    BackwardHopCell(*it, last, it->cached_bwd), BracketedOrDash(it->deposits), CollectsCell(*it)});
  }
  return rows;
}

std::string RenderTables(const AttnResTransport& t) {
  Table fwd(ForwardTableHeader()), bwd(BackwardTableHeader());
  for (auto& row : ForwardTableCells(t)) fwd.AddRow(std::move(row));
  for (auto& row : BackwardTableCells(t)) bwd.AddRow(std::move(row));
  std::ostringstream out;
  out << fwd.Render() << "Stack entries sent per micro-batch in forward: " << t.naive_entries
      << " with the cache off, " << t.cached_entries << " with it on; peak per hop " << t.option2_peak_per_hop
      << " off, " << t.cached_peak_per_hop << " on; option 1 (direct sends) " << t.option1_entries << ".\n\n"
      << bwd.Render() << "Gradient entries sent per micro-batch in backward: " << t.naive_bwd_entries
      << " with the cache off, " << t.cached_bwd_entries << " with it on.\n";
  return out.str();
}

}  // namespace kp
