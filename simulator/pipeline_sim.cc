#include "simulator/pipeline_sim.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "common/limits.h"
#include "common/range.h"
#include "simulator/event_queue.h"

namespace kp {

namespace {

constexpr std::int64_t kNotDone = std::numeric_limits<std::int64_t>::min();

Status CheckCosts(const StageCosts& c) {
  const std::pair<const char*, Nanoseconds> fields[] = {{"--f-us", c.f}, {"--b-us", c.b}, {"--w-us", c.w},
                                                        {"--p2p-us", c.p2p}};
  for (const auto& [flag, v] : fields)
    if (v.value() < 0)
      return Status::InvalidArgument(std::string(flag) + ": must not be negative, got " + std::to_string(v.value()) +
                                     " ns");
  return Status::Ok();
}

// One step's execution. Callbacks capture only (this, rank), which
// std::function stores without allocating, so the run allocates nothing per
// event.
class PipelineRun {
 public:
  PipelineRun(const ActionIndex& index, std::vector<Nanoseconds> duration, std::vector<Nanoseconds> lag,
              bool record_timeline)
      : index_(index), duration_(std::move(duration)), lag_(std::move(lag)), record_(record_timeline),
        done_at_(index.nodes.size(), kNotDone), waiter_(index.nodes.size(), -1) {
    const int pp = static_cast<int>(index.rank_begin.size()) - 1;
    ranks_.resize(pp);
    streams_.reserve(pp);
    for (int r = 0; r < pp; ++r) {
      streams_.emplace_back(queue_);
      ranks_[r].next = index.rank_begin[r];
    }
    if (record_) timeline_.reserve(index.nodes.size());
  }

  void Run() {
    for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) Advance(r);
    queue_.Run();
  }

  /// The first rank that did not reach the end of its list, or -1.
  int StuckRank() const {
    for (int r = 0; r < static_cast<int>(ranks_.size()); ++r)
      if (ranks_[r].next < index_.rank_begin[r + 1]) return r;
    return -1;
  }

  PipelineSimResult Summary(const StageCosts& costs, int microbatches, OptimizerSync sync) && {
    PipelineSimResult out;
    out.optimizer_sync = sync;
    Nanoseconds longest_span{0};
    for (const RankState& s : ranks_) {
      out.makespan = std::max(out.makespan, s.last_end);
      const Nanoseconds span = s.any ? s.last_end - s.first_start : Nanoseconds(0);
      out.span_per_rank.push_back(span);
      longest_span = std::max(longest_span, span);
    }
    out.step = sync == OptimizerSync::kPostValidation ? longest_span : out.makespan;
    const Nanoseconds work = (costs.f + costs.b + costs.w) * microbatches;
    out.bubble_fraction = out.step.value() > 0 ? (out.step - work) / out.step : 0.0;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const Nanoseconds busy = streams_[r].busy();
      out.idle_per_rank.push_back(out.makespan - busy);
      out.span_idle_per_rank.push_back(out.span_per_rank[r] - busy);
      out.peak_inflight.push_back(ranks_[r].peak_inflight);
    }
    out.events = queue_.processed();
    out.timeline = std::move(timeline_);
    return out;
  }

 private:
  struct RankState {
    int next = 0;  // the node the rank issues next
    Nanoseconds started{0};
    Nanoseconds first_start{0};
    Nanoseconds last_end{0};
    bool any = false;
    int inflight = 0;
    int peak_inflight = 0;
  };

  bool Done(int node) const { return done_at_[node] != kNotDone; }

  // Issues the rank's actions until one must wait or occupies the stream.
  void Advance(int r) {
    RankState& s = ranks_[r];
    const int end = index_.rank_begin[r + 1];
    while (s.next < end) {
      const int n = s.next;
      const int dep = index_.nodes[n].dep;
      if (dep >= 0) {
        if (!Done(dep)) {
          waiter_[dep] = r;
          return;
        }
        const Nanoseconds ready = Nanoseconds(done_at_[dep]) + lag_[n];
        if (ready > queue_.now()) {
          queue_.At(ready, [this, r] { Advance(r); });
          return;
        }
      }
      if (IsCompute(index_.nodes[n].action.type) || duration_[n] > Nanoseconds(0)) {
        s.started = streams_[r].Submit(duration_[n], [this, r] { Complete(r); });
        if (!s.any) s.first_start = s.started;
        s.any = true;
        return;
      }
      ++s.next;  // an async SEND and a RECV take no time of the rank's
      MarkDone(n);
    }
  }

  void Complete(int r) {
    RankState& s = ranks_[r];
    const int n = s.next++;
    const PipelineAction& a = index_.nodes[n].action;
    s.last_end = queue_.now();
    if (a.type == ActionType::kForward) s.peak_inflight = std::max(s.peak_inflight, ++s.inflight);
    if (IsBackwardInput(a.type)) --s.inflight;
    // The timeline lists compute; a blocking send shows as the gap it leaves.
    if (record_ && IsCompute(a.type)) timeline_.push_back(TimelineEntry{r, a, s.started, s.last_end});
    MarkDone(n);
    Advance(r);
  }

  // One waiter slot per node suffices: a node's only dependent on another
  // rank is the RECV of its SEND, and a rank waits on one node at a time.
  void MarkDone(int n) {
    done_at_[n] = queue_.now().value();
    const int w = waiter_[n];
    if (w < 0) return;
    waiter_[n] = -1;
    Advance(w);
  }

  const ActionIndex& index_;
  std::vector<Nanoseconds> duration_;
  std::vector<Nanoseconds> lag_;
  bool record_;
  EventQueue queue_;
  std::vector<Stream> streams_;
  std::vector<RankState> ranks_;
  std::vector<std::int64_t> done_at_;
  std::vector<int> waiter_;
  std::vector<TimelineEntry> timeline_;
};

}  // namespace

ActionCost CostsPerAction(const StageCosts& costs, int stages_per_rank) {
  const std::int64_t k = std::max(1, stages_per_rank);
  const Nanoseconds f = costs.f / k, b = costs.b / k, w = costs.w / k, full = (costs.b + costs.w) / k;
  return [=](const PipelineAction& a) {
    switch (a.type) {
      case ActionType::kForward: return f;
      case ActionType::kBackwardInput: return b;
      case ActionType::kBackwardWeight: return w;
      case ActionType::kFullBackward: return full;
      default: return Nanoseconds(0);
    }
  };
}

Result<PipelineSimResult> SimulatePipeline(const PipelineSchedule& schedule, const StageCosts& costs,
                                           const PipelineSimOptions& options) {
  KP_RETURN_IF_ERROR(CheckCosts(costs));
  PipelineSchedule lowered;
  const PipelineSchedule* run = &schedule;
  if (!HasCommunication(schedule)) {
    KP_ASSIGN_OR_RETURN(lowered, AddCommunication(schedule));
    run = &lowered;
  }
  KP_ASSIGN_OR_RETURN(const ActionIndex index, IndexActions(*run));

  const ActionCost cost = CostsPerAction(costs, run->StagesPerRank());
  const Nanoseconds p2p = costs.p2p;
  const TransferCost transfer = options.transfer ? options.transfer : TransferCost([p2p](int, int, int, bool) {
    return p2p;
  });
  std::vector<Nanoseconds> duration(index.nodes.size()), lag(index.nodes.size());
  for (size_t n = 0; n < index.nodes.size(); ++n) {
    const ActionNode& node = index.nodes[n];
    if (IsCompute(node.action.type)) duration[n] = cost(node.action);
    if (node.transfer) {
      const int from = index.nodes[node.dep].action.stage, to = node.action.stage;
      const Nanoseconds t = transfer(from, to, node.action.microbatch, from > to);
      // Blocking: the SEND holds its rank for the transfer, and the data is
      // there when it returns. Async: the RECV waits out the transfer.
      if (options.send_mode == SendMode::kBlocking) duration[node.dep] = t;
      else lag[n] = t;
    }
  }

  // The step ends no later than if every action and transfer ran one after
  // another (some always runs, or the schedule deadlocks), so the clock
  // (integer nanoseconds) holds it when that sum does.
  double serial_ns = 0;
  for (size_t n = 0; n < index.nodes.size(); ++n) serial_ns += double(duration[n].value()) + double(lag[n].value());
  if (serial_ns > limits::kMaxSimulatedSeconds * 1e9)
    return Status::InvalidArgument("--microbatches: the step's work (every action and transfer of every rank) sums "
                                   "to " + ShowNumber(serial_ns / 1e9) + " s, beyond the simulator's clock of " +
                                   ShowNumber(limits::kMaxSimulatedSeconds) + " s (100 years); give fewer "
                                   "micro-batches or smaller costs (--f-us --b-us --w-us --p2p-us)");
  PipelineRun sim(index, std::move(duration), std::move(lag), options.record_timeline);
  sim.Run();
  if (sim.StuckRank() >= 0) {
    KP_RETURN_IF_ERROR(CheckDeadlockFree(*run));
    return Status::Internal("pipeline simulation stalled on rank " + std::to_string(sim.StuckRank()) +
                            " although the schedule has no cycle");
  }
  return std::move(sim).Summary(costs, schedule.microbatches, options.optimizer_sync);
}

Result<std::vector<Nanoseconds>> SimulateBackToBackSteps(const PipelineSchedule& schedule, const StageCosts& costs,
                                                         int steps, const PipelineSimOptions& options) {
  if (steps < 1) return Status::InvalidArgument("--steps: must be >= 1, got " + std::to_string(steps));
  KP_RETURN_IF_ERROR(ValidateSchedule(schedule));
  const int m = schedule.microbatches;
  PipelineSchedule repeated = schedule;
  repeated.microbatches = m * steps;
  for (size_t r = 0; r < schedule.ranks.size(); ++r) {
    repeated.ranks[r].clear();
    for (int k = 0; k < steps; ++k)
      for (const std::optional<PipelineAction>& a : schedule.ranks[r]) {
        if (!a) continue;
        PipelineAction shifted = *a;
        shifted.microbatch += k * m;
        repeated.ranks[r].push_back(shifted);
      }
  }
  PipelineSimOptions o = options;
  o.record_timeline = true;
  o.optimizer_sync = OptimizerSync::kSynchronised;
  if (options.transfer)
    o.transfer = [t = options.transfer, m](int from, int to, int mb, bool backward) {
      return t(from, to, mb % m, backward);
    };
  KP_ASSIGN_OR_RETURN(const PipelineSimResult r, SimulatePipeline(repeated, costs, o));
  std::vector<Nanoseconds> ends(steps, Nanoseconds(0));
  for (const TimelineEntry& e : r.timeline) {
    Nanoseconds& end = ends[e.action.microbatch / m];
    end = std::max(end, e.end);
  }
  return ends;
}

}  // namespace kp
