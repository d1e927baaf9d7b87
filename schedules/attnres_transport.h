// The Block Attention Residual transport of a pipeline (torchtitan PR #4312):
// which residual blocks cross each stage boundary, with the whole stack on
// every hop (the naive transport, the maintainers' "option 2") or with the
// rank cache (only what the receiving rank has not seen), and in backward
// which gradients go back on the wire and which are deposited into and
// collected from a rank's cache. One micro-batch, simulated forward in stage
// order over the split, as the PR's BlockLayoutTables does.
//
// Vocabulary, as in the PR's tables:
//  - The stack starts with the embedding `e` (entry 0). The first layer of
//    block k (layer k * block_size, k >= 1) commits the previous block's
//    result `x{k * block_size}` before its sub-layers attend; the last
//    block's result is consumed by the head's aggregation and never enters
//    the stack. So a model of n blocks has n stack entries.
//  - A stage boundary inside a block puts the partial block on the wire as
//    the hidden state, which travels on every hop and is not an entry.
//  - Gradients are named with a `d` prefix (`de`, `dx4`).
//
// Thread-safety: plain values and pure functions.
#ifndef KIMI_PLAN_SCHEDULES_ATTNRES_TRANSPORT_H_
#define KIMI_PLAN_SCHEDULES_ATTNRES_TRANSPORT_H_

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "common/units.h"
#include "specs/stage_split.h"

namespace kp {

/// One stage's row of the PR's forward and backward tables. Entry lists are
/// in stack order. Forward lists describe the hop *into* this stage (from
/// stage - 1); backward lists the hop into this stage in backward, i.e. from
/// stage + 1, carrying the gradients of what the forward hop stage -> stage + 1
/// carried. The first stage has no forward hop, the last no backward hop.
struct AttnResStageRow {
  int stage = 0;
  int rank = 0;           ///< stage % pp (loop style)
  int virtual_stage = 0;  ///< stage / pp
  StageLayers layers;
  std::vector<std::string> committed;    ///< entries this stage adds to the stack ("stored stack" column)
  std::vector<std::string> held_before;  ///< entries its rank's cache holds when it runs ("already cached")
  std::vector<std::string> naive_fwd;    ///< the whole stack, received from stage - 1
  std::vector<std::string> cached_fwd;   ///< what its rank lacks, received from stage - 1
  std::vector<std::string> naive_bwd;    ///< gradients received from stage + 1, cache off
  std::vector<std::string> cached_bwd;   ///< gradients received from stage + 1, cache on
  /// Cache on: gradients of the entries this stage read from its rank's cache,
  /// deposited there instead of sent. A stage reads the stack when it has a
  /// layer or the head (the aggregation reads every entry), so a head-only
  /// stage deposits every entry it holds; a stage with neither deposits nothing.
  std::vector<std::string> deposits;
  /// Cache on: (later same-rank stage, the gradients it deposited for entries
  /// this stage put on the rank, by committing or receiving them), by stage.
  std::vector<std::pair<int, std::vector<std::string>>> collects;
};

/// The transport of one micro-batch. Backward carries the same counts of
/// gradients as forward carries entries, hop for hop.
struct AttnResTransport {
  int layers = 0;
  int block_size = 0;
  int pp = 0;
  int vp = 0;
  int stack_entries = 0;  ///< entries that ever join the stack: the block count
  std::vector<AttnResStageRow> stages;

  int naive_entries = 0;         ///< forward, cache off (the PR's "option 2" column)
  int cached_entries = 0;        ///< forward, cache on ("this PR")
  int naive_bwd_entries = 0;     ///< backward, cache off; equals naive_entries
  int cached_bwd_entries = 0;    ///< backward, cache on; equals cached_entries
  int cached_peak_per_hop = 0;   ///< most entries on one hop, cache on
  int option1_entries = 0;       ///< each entry sent straight from its producer to every later rank reading it
  int option2_peak_per_hop = 0;  ///< most entries on one hop with the whole stack on every hop
};

/// A schedule's own stage-to-rank map (torch's stage_index_to_group_rank),
/// with the schedule's name for the error that refuses it.
struct StageRankMap {
  std::string schedule;
  std::vector<int> rank_of_stage;
};

/// The transport for `layers` decoder layers in blocks of `block_size`, cut
/// by `split` into stages placed loop style (stage s on rank s % pp).
/// InvalidArgument, one line naming the field: `--block-size` below 1,
/// `--split` not covering layers [0, layers) contiguously, `--pp` below 1 or
/// not dividing the number of stages.
Result<AttnResTransport> ComputeAttnResTransport(int layers, int block_size, const StageSplit& split, int pp);

/// As above, for a schedule's explicit stage-to-rank map. The rank cache
/// assumes the loop-style assignment, so, as PR #4312 does with the cache on,
/// any other map is refused (`--schedule`), naming the schedule and the first
/// stage off it. The naive transport does not depend on the map: for a
/// V-shaped schedule with the cache off use the overload above.
Result<AttnResTransport> ComputeAttnResTransport(int layers, int block_size, const StageSplit& split, int pp,
                                                 const StageRankMap& map);

/// "e" for entry 0, otherwise "x{entry * block_size}".
std::string AttnResEntryName(int entry, int block_size);

/// Entries on the forward hop from_stage -> from_stage + 1 (and on the
/// backward hop back); 0 where there is no such hop.
int HopEntries(const AttnResTransport& t, int from_stage, bool cache);

/// Bytes of that hop: the hidden state plus `entry_bytes` per entry (one
/// block is [tokens, hidden] like the hidden state). Zero where there is no
/// hop (the last stage, or a stage out of range).
Bytes HopBytes(const AttnResTransport& t, int from_stage, bool cache, Bytes hidden_state_bytes, Bytes entry_bytes);

/// Keys: layers, block_size, pp, vp, stack_entries, naive_entries,
/// cached_entries, naive_bwd_entries, cached_bwd_entries, cached_peak_per_hop,
/// option1_entries, option2_entries (= naive_entries), option2_peak_per_hop,
/// and stages: one object per stage with the row's fields (collects as
/// [{"stage": t, "entries": [...]}]).
nlohmann::json ToJson(const AttnResTransport& t);

/// The PR's forward table, one row of cells per stage in stage order:
/// stage (rank, virtual), layers, stored stack, fwd no cache, fwd cache,
/// already cached; "-" where there is nothing.
std::vector<std::string> ForwardTableHeader();
std::vector<std::vector<std::string>> ForwardTableCells(const AttnResTransport& t);

/// The PR's backward table, last stage first: stage (rank, virtual), bwd no
/// cache, bwd cache, deposits, collects.
std::vector<std::string> BackwardTableHeader();
std::vector<std::vector<std::string>> BackwardTableCells(const AttnResTransport& t);

/// Both tables as text, each followed by its per-micro-batch totals.
std::string RenderTables(const AttnResTransport& t);

}  // namespace kp

#endif  // KIMI_PLAN_SCHEDULES_ATTNRES_TRANSPORT_H_
