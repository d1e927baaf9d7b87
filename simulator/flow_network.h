// Flow-level network simulation on the EventQueue. A transfer (a flow) is
// a byte count over a path of links; the flows crossing a link share its
// bandwidth max-min fairly (progressive filling: every flow gets the rate of
// its tightest link's fair share, and what a flow bottlenecked elsewhere
// leaves unused goes to the others). Rates are recomputed whenever a flow
// starts or finishes, and nowhere else, so between those instants every
// flow moves at a constant rate and finishing times are exact.
//
// Timing contract, in integer nanoseconds:
//  - a flow's bytes drain from the instant Start is called;
//  - a flow has drained at the first nanosecond at which its remaining
//    bytes are done (fractional instants round up; flows with less than half
//    a nanosecond of bytes left at an event finish with it);
//  - its bandwidth is released at that instant, and its callback runs as an
//    event one path latency (the sum of its links' latencies) later: latency
//    is paid once per path, not per link crossing.
// A flow with an empty path (a GPU to itself) or no bytes drains at once.
// Events at the same instant run in the order they were scheduled, so a
// simulation is a pure function of its inputs.
//
// Thread-safety: single-threaded, like the EventQueue it runs on. The
// network must outlive the queue's run.
#ifndef KIMI_PLAN_SIMULATOR_FLOW_NETWORK_H_
#define KIMI_PLAN_SIMULATOR_FLOW_NETWORK_H_

#include <cstdint>
#include <map>
#include <vector>

#include "common/units.h"
#include "simulator/event_queue.h"
#include "simulator/link.h"

namespace kp {

class FlowNetwork {
 public:
  using FlowId = std::int64_t;

  /// `links[id]` is the capacity of link `id`; every bandwidth must be > 0.
  FlowNetwork(EventQueue& queue, std::vector<LinkCapacity> links);

  /// Starts moving `bytes` (>= 0) over `path` (valid link ids, each at most
  /// once) now; `done` runs when the last byte has arrived. Returns the id
  /// the accessors below take.
  FlowId Start(std::vector<LinkId> path, Bytes bytes, EventQueue::Callback done);

  /// The current rate of a flow; 0 once it has drained or for unknown ids.
  /// (Non-const: starts at one instant are settled together, lazily.)
  BytesPerSecond rate(FlowId f);
  /// Flows that still have bytes to move.
  int active() const { return static_cast<int>(flows_.size()); }
  /// How many times rates were recomputed (once per instant with starts and
  /// per batch of finishes): the simulation's work.
  std::uint64_t recomputes() const { return recomputes_; }
  const std::vector<LinkCapacity>& links() const { return links_; }

 private:
  struct Flow {
    std::vector<LinkId> path;
    double remaining = 0;  // bytes
    double rate = 0;       // bytes per second
    Nanoseconds latency{0};
    EventQueue::Callback done;
  };

  /// Moves every flow's bytes forward to now().
  void Advance();
  /// Progressive filling over the active flows.
  void Recompute();
  /// Recomputes once for every flow started at this instant.
  void Settle();
  /// Schedules the next drain; earlier schedules become stale.
  void ScheduleNextDrain();
  void OnDrainEvent(std::uint64_t epoch);
  void Finish(Flow& f);

  EventQueue& q_;
  std::vector<LinkCapacity> links_;
  std::map<FlowId, Flow> flows_;  // ordered: deterministic iteration
  FlowId next_id_ = 0;
  Nanoseconds last_advance_{0};
  std::uint64_t epoch_ = 0;
  std::uint64_t recomputes_ = 0;
  bool dirty_ = false;           // flows started since the last recompute
  bool settle_pending_ = false;  // a Settle() is queued at the current instant
  struct LinkState {
    double spare = 0;  // capacity not yet given to frozen flows
    int unfrozen = 0;
    std::vector<Flow*> flows;
  };
  std::vector<LinkState> state_;  // by link id; reused across recomputes
};

}  // namespace kp

#endif  // KIMI_PLAN_SIMULATOR_FLOW_NETWORK_H_
