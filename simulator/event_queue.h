// The deterministic discrete-event core every simulation runs on. Time is
// integer nanoseconds; events at the same time run in the order they were
// scheduled (a stable tie-break on a sequence number), so a simulation is a
// pure function of its inputs and tests can pin its results exactly.
//
// Thread-safety: single-threaded; one queue per simulation.
#ifndef KIMI_PLAN_SIMULATOR_EVENT_QUEUE_H_
#define KIMI_PLAN_SIMULATOR_EVENT_QUEUE_H_

#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

#include "common/units.h"

namespace kp {

class EventQueue {
 public:
  using Callback = std::function<void()>;

  /// Schedules `cb` at absolute time `t` (never before now()).
  void At(Nanoseconds t, Callback cb) {
    heap_.push(Event{t < now_ ? now_ : t, next_seq_++, std::move(cb)});
  }
  /// Schedules `cb` `delay` after now().
  void After(Nanoseconds delay, Callback cb) { At(now_ + delay, std::move(cb)); }

  Nanoseconds now() const { return now_; }
  std::uint64_t processed() const { return processed_; }
  bool empty() const { return heap_.empty(); }

  /// Runs events until none is left; returns how many ran in this call.
  std::uint64_t Run() {
    const std::uint64_t start = processed_;
    while (!heap_.empty()) {
      Event e = std::move(const_cast<Event&>(heap_.top()));
      heap_.pop();
      now_ = e.time;
      ++processed_;
      e.cb();
    }
    return processed_ - start;
  }

 private:
  struct Event {
    Nanoseconds time;
    std::uint64_t seq;
    Callback cb;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.time != b.time ? a.time > b.time : a.seq > b.seq;
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> heap_;
  Nanoseconds now_{0};
  std::uint64_t next_seq_ = 0;
  std::uint64_t processed_ = 0;
};

/// A serial resource, such as one GPU's compute stream: work runs one piece
/// at a time in submission order.
class Stream {
 public:
  explicit Stream(EventQueue& q) : q_(q) {}

  /// Runs `duration` of work once the stream is free; `done` fires at its
  /// end. Returns the start time.
  Nanoseconds Submit(Nanoseconds duration, EventQueue::Callback done) {
    const Nanoseconds start = free_at_ > q_.now() ? free_at_ : q_.now();
    free_at_ = start + duration;
    busy_ += duration;
    q_.At(free_at_, std::move(done));
    return start;
  }
  Nanoseconds free_at() const { return free_at_; }
  /// Total work submitted so far.
  Nanoseconds busy() const { return busy_; }

 private:
  EventQueue& q_;
  Nanoseconds free_at_{0};
  Nanoseconds busy_{0};
};

}  // namespace kp

#endif  // KIMI_PLAN_SIMULATOR_EVENT_QUEUE_H_
