#include "simulator/schedule_graph.h"

#include <algorithm>
#include <string>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/depth_first_search.hpp>
#include <boost/graph/topological_sort.hpp>

namespace kp {

namespace {

using T = ActionType;
using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
using Vertex = boost::graph_traits<Graph>::vertex_descriptor;
using Edge = boost::graph_traits<Graph>::edge_descriptor;

constexpr int kTypeCount = 8;

// Node ids by (type, stage, micro-batch); ValidateSchedule has made each unique.
class NodeLookup {
 public:
  NodeLookup(int stages, int mbs)
      : stages_(stages), mbs_(mbs), ids_(static_cast<size_t>(kTypeCount) * stages * mbs, -1) {}
  void Set(const PipelineAction& a, int id) { ids_[Index(a.type, a.stage, a.microbatch)] = id; }
  int Get(ActionType t, int stage, int mb) const { return ids_[Index(t, stage, mb)]; }
  /// The I or the B of (stage, mb), whichever the schedule lists.
  int BackwardInput(int stage, int mb) const {
    const int i = Get(T::kBackwardInput, stage, mb);
    return i >= 0 ? i : Get(T::kFullBackward, stage, mb);
  }

 private:
  size_t Index(ActionType t, int stage, int mb) const {
    return (static_cast<size_t>(t) * stages_ + stage) * mbs_ + mb;
  }
  int stages_, mbs_;
  std::vector<int> ids_;
};

struct Dep {
  int node = -1;
  bool transfer = false;
};

// What `a` waits for besides its predecessor on the rank. With listed
// communication a crossing boundary is served by its RECV; without, the
// compute action waits for the remote one across a transfer.
Dep Resolve(const PipelineAction& a, const PipelineSchedule& s, const NodeLookup& ids, bool comm) {
  const int st = a.stage, m = a.microbatch;
  auto crosses = [&](int x, int y) { return s.stage_to_rank[x] != s.stage_to_rank[y]; };
  switch (a.type) {
    case T::kForward:
      if (st == 0) return {};
      if (!crosses(st - 1, st)) return {ids.Get(T::kForward, st - 1, m), false};
      return comm ? Dep{ids.Get(T::kRecvF, st, m), false} : Dep{ids.Get(T::kForward, st - 1, m), true};
    case T::kBackwardInput:
    case T::kFullBackward:
      if (st == s.num_stages - 1) return {ids.Get(T::kForward, st, m), false};
      if (!crosses(st, st + 1)) return {ids.BackwardInput(st + 1, m), false};
      return comm ? Dep{ids.Get(T::kRecvB, st, m), false} : Dep{ids.BackwardInput(st + 1, m), true};
    case T::kBackwardWeight: return {ids.Get(T::kBackwardInput, st, m), false};
    case T::kSendF: return {ids.Get(T::kForward, st, m), false};
    case T::kSendB: return {ids.BackwardInput(st, m), false};
    case T::kRecvF: return {ids.Get(T::kSendF, st - 1, m), true};
    case T::kRecvB: return {ids.Get(T::kSendB, st + 1, m), true};
  }
  return {};
}

Graph BuildGraph(const ActionIndex& index) {
  Graph g(index.nodes.size());
  const int pp = static_cast<int>(index.rank_begin.size()) - 1;
  for (int r = 0; r < pp; ++r)
    for (int n = index.rank_begin[r] + 1; n < index.rank_begin[r + 1]; ++n) boost::add_edge(n - 1, n, g);
  for (size_t n = 0; n < index.nodes.size(); ++n)
    if (index.nodes[n].dep >= 0) boost::add_edge(index.nodes[n].dep, n, g);
  return g;
}

// Records the DFS tree and the first back edge, which closes a cycle.
class CycleFinder : public boost::default_dfs_visitor {
 public:
  CycleFinder(std::vector<Vertex>& parent, Edge& back, bool& found) : parent_(parent), back_(back), found_(found) {}
  void tree_edge(Edge e, const Graph& g) { parent_[boost::target(e, g)] = boost::source(e, g); }
  void back_edge(Edge e, const Graph&) {
    if (!found_) {
      back_ = e;
      found_ = true;
    }
  }

 private:
  std::vector<Vertex>& parent_;
  Edge& back_;
  bool& found_;
};

// The cycle's nodes in edge order (each waits for the one before it).
std::vector<int> FindCycle(const Graph& g) {
  std::vector<Vertex> parent(boost::num_vertices(g));
  Edge back;
  bool found = false;
  boost::depth_first_search(g, boost::visitor(CycleFinder(parent, back, found)));
  if (!found) return {};
  const Vertex head = boost::target(back, g);
  std::vector<int> cycle;
  for (Vertex v = boost::source(back, g);; v = parent[v]) {
    cycle.push_back(static_cast<int>(v));
    if (v == head) break;
  }
  std::reverse(cycle.begin(), cycle.end());
  return cycle;
}

std::string Name(const ActionNode& n) { return n.action.ToString(); }

// Reads the cycle backwards, as the chain of waits a stuck run shows: each
// rank stuck at an action waiting for another rank's action, which that rank
// lists after the action it is itself stuck at.
std::string DescribeCycle(const ActionIndex& index, const std::vector<int>& cycle) {
  const int n = static_cast<int>(cycle.size());
  auto id = [&](int i) { return cycle[((i % n) + n) % n]; };
  auto at = [&](int i) -> const ActionNode& { return index.nodes[id(i)]; };
  // A data edge from an action listed earlier on the same rank adds nothing
  // to program order; only the others are places where a rank gets stuck.
  auto waits = [&](int i) {
    const ActionNode& node = at(i);
    return node.dep == id(i - 1) && !(index.nodes[node.dep].rank == node.rank && node.dep < id(i));
  };
  // Start at the lowest stuck rank so that the same cycle reads the same.
  int start = -1;
  for (int i = 0; i < n; ++i)
    if (waits(i) && (start < 0 || id(i) < id(start))) start = i;  // node ids run rank by rank
  constexpr int kShown = 6;
  std::string out = "deadlock: ";
  int i = start, shown = 0, hidden = 0;
  do {
    const ActionNode& stuck = at(i);
    const ActionNode& awaited = at(i - 1);
    int j = i - 1;
    while (!waits(j)) --j;
    if (shown < kShown) {
      out += "rank " + std::to_string(stuck.rank) + " waits at " + Name(stuck) + " for " + Name(awaited) +
             " on rank " + std::to_string(awaited.rank);
      if (at(j).action != awaited.action) out += ", listed after " + Name(at(j));
      out += " -> ";
      ++shown;
    } else {
      ++hidden;
    }
    i = j;
  } while (((i % n) + n) % n != start);
  if (hidden > 0) out += "... (" + std::to_string(hidden) + " more waits) -> ";
  return out + "back to rank " + std::to_string(at(start).rank) + " at " + Name(at(start));
}

}  // namespace

Result<ActionIndex> IndexActions(const PipelineSchedule& schedule) {
  KP_RETURN_IF_ERROR(ValidateSchedule(schedule));
  ActionIndex index;
  NodeLookup ids(schedule.num_stages, schedule.microbatches);
  index.rank_begin.push_back(0);
  for (int r = 0; r < schedule.pp; ++r) {
    const auto& row = schedule.ranks[r];
    for (int c = 0; c < static_cast<int>(row.size()); ++c) {
      if (!row[c]) continue;
      ids.Set(*row[c], static_cast<int>(index.nodes.size()));
      index.nodes.push_back(ActionNode{*row[c], r, c});
    }
    index.rank_begin.push_back(static_cast<int>(index.nodes.size()));
  }
  const bool comm = HasCommunication(schedule);
  for (ActionNode& node : index.nodes) {
    const Dep d = Resolve(node.action, schedule, ids, comm);
    node.dep = d.node;
    node.transfer = d.transfer;
  }
  return index;
}

Status CheckDeadlockFree(const PipelineSchedule& schedule) {
  KP_ASSIGN_OR_RETURN(const ActionIndex index, IndexActions(schedule));
  const std::vector<int> cycle = FindCycle(BuildGraph(index));
  if (cycle.empty()) return Status::Ok();
  return Status::InvalidArgument(DescribeCycle(index, cycle));
}

Result<CriticalPathResult> CriticalPath(const PipelineSchedule& schedule, const ActionCost& cost,
                                        const TransferCost& transfer) {
  KP_ASSIGN_OR_RETURN(const ActionIndex index, IndexActions(schedule));
  const Graph g = BuildGraph(index);
  const std::vector<int> cycle = FindCycle(g);
  if (!cycle.empty()) return Status::InvalidArgument(DescribeCycle(index, cycle));

  std::vector<Vertex> order;  // reverse topological
  boost::topological_sort(g, std::back_inserter(order));
  const size_t count = index.nodes.size();
  std::vector<Nanoseconds> finish(count);
  std::vector<int> via(count, -1);  // the predecessor that decided the start
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const int v = static_cast<int>(*it);
    const ActionNode& node = index.nodes[v];
    Nanoseconds start{0};
    const bool first_on_rank = v == index.rank_begin[node.rank];
    if (!first_on_rank) {
      start = finish[v - 1];
      via[v] = v - 1;
    }
    if (node.dep >= 0) {
      const ActionNode& d = index.nodes[node.dep];
      const Nanoseconds lag =
          node.transfer ? transfer(d.action.stage, node.action.stage, node.action.microbatch,
                                   d.action.stage > node.action.stage)
                        : Nanoseconds(0);
      if (via[v] < 0 || finish[node.dep] + lag > start) {
        start = finish[node.dep] + lag;
        via[v] = node.dep;
      }
    }
    finish[v] = start + (IsCompute(node.action.type) ? cost(node.action) : Nanoseconds(0));
  }
  CriticalPathResult result;
  int last = -1;
  for (size_t v = 0; v < count; ++v)
    if (last < 0 || finish[v] > finish[last]) last = static_cast<int>(v);
  if (last < 0) return result;
  result.length = finish[last];
  for (int v = last; v >= 0; v = via[v]) result.actions.push_back({index.nodes[v].rank, index.nodes[v].action});
  std::reverse(result.actions.begin(), result.actions.end());
  return result;
}

}  // namespace kp
