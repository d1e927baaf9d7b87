#include "simulator/flow_network.h"

#include <cassert>
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace kp {

namespace {

// Nanoseconds until `remaining` bytes drain at `rate` bytes per second.
double DrainNs(double remaining, double rate) { return remaining / rate * 1e9; }

// A drain instant computed in doubles lands a hair past an integer it
// should equal (1e9 bytes at 1e9 B/s is 1000000000.0000001 ns); ceil only
// what is past the integer by more than rounding noise.
std::int64_t CeilNs(double ns) {
  const double noise = 1e-6 + 1e-12 * std::abs(ns);
  return static_cast<std::int64_t>(std::ceil(ns - noise));
}

// A flow with less than this much time left at an event finishes with it
// rather than costing one more event a fraction of a nanosecond later.
constexpr double kFinishSlackNs = 0.5;

}  // namespace

FlowNetwork::FlowNetwork(EventQueue& queue, std::vector<LinkCapacity> links)
    : q_(queue), links_(std::move(links)), last_advance_(queue.now()) {}

FlowNetwork::FlowId FlowNetwork::Start(std::vector<LinkId> path, Bytes bytes, EventQueue::Callback done) {
  const FlowId id = next_id_++;
  Flow f;
  for (LinkId l : path) {
    assert(l >= 0 && static_cast<size_t>(l) < links_.size());
    f.latency += links_[l].latency;
  }
  f.path = std::move(path);
  f.remaining = bytes.value();
  f.done = std::move(done);
  if (f.path.empty() || f.remaining <= 0) {
    Finish(f);
    return id;
  }
  Advance();
  f.rate = 0;
  flows_.emplace(id, std::move(f));
  // Many transfers start at one instant (every GPU of a node, every hop of a
  // broadcast): one recompute serves them all.
  dirty_ = true;
  if (!settle_pending_) {
    settle_pending_ = true;
    q_.After(Nanoseconds(0), [this] { Settle(); });
  }
  return id;
}

void FlowNetwork::Settle() {
  settle_pending_ = false;
  if (!dirty_) return;
  Recompute();
  ScheduleNextDrain();
}

BytesPerSecond FlowNetwork::rate(FlowId f) {
  if (dirty_) Settle();
  auto it = flows_.find(f);
  return BytesPerSecond(it == flows_.end() ? 0.0 : it->second.rate);
}

void FlowNetwork::Advance() {
  const double dt_s = ToSeconds(q_.now() - last_advance_).value();
  last_advance_ = q_.now();
  if (dt_s <= 0) return;
  for (auto& [id, f] : flows_) f.remaining -= f.rate * dt_s;
}

void FlowNetwork::Recompute() {
  ++recomputes_;
  dirty_ = false;
  state_.resize(links_.size());
  // Links in id order, so ties between equally tight links break the same
  // way every run.
  std::vector<LinkId> touched;
  for (auto& [id, f] : flows_) {
    f.rate = -1;  // not frozen yet
    for (LinkId l : f.path) {
      LinkState& st = state_[l];
      if (st.flows.empty()) {
        touched.push_back(l);
        st.spare = links_[l].bandwidth.value();
        st.unfrozen = 0;
      }
      ++st.unfrozen;
      st.flows.push_back(&f);
    }
  }
  std::sort(touched.begin(), touched.end());
  size_t unfrozen = flows_.size();
  while (unfrozen > 0) {
    // The tightest link fixes the rate of every flow still crossing it.
    LinkState* tight = nullptr;
    double share = std::numeric_limits<double>::infinity();
    for (LinkId l : touched) {
      const LinkState& st = state_[l];
      if (st.unfrozen == 0) continue;
      const double fair = std::max(0.0, st.spare) / st.unfrozen;
      if (fair < share) share = fair, tight = &state_[l];
    }
    for (Flow* f : tight->flows) {
      if (f->rate >= 0) continue;
      f->rate = share;
      --unfrozen;
      for (LinkId l : f->path) {
        state_[l].spare -= share;
        --state_[l].unfrozen;
      }
    }
  }
  for (LinkId l : touched) state_[l].flows.clear();
}

void FlowNetwork::ScheduleNextDrain() {
  const std::uint64_t epoch = ++epoch_;
  double soonest = std::numeric_limits<double>::infinity();
  for (const auto& [id, f] : flows_) {
    if (f.rate > 0) soonest = std::min(soonest, DrainNs(f.remaining, f.rate));
  }
  if (soonest == std::numeric_limits<double>::infinity()) return;
  const std::int64_t wait = std::max<std::int64_t>(0, CeilNs(soonest));
  q_.After(Nanoseconds(wait), [this, epoch] { OnDrainEvent(epoch); });
}

void FlowNetwork::OnDrainEvent(std::uint64_t epoch) {
  // A start or an earlier drain since this was scheduled changed the rates
  // and scheduled a fresh event.
  if (epoch != epoch_) return;
  Advance();
  for (auto it = flows_.begin(); it != flows_.end();) {
    Flow& f = it->second;
    if (f.rate > 0 && DrainNs(f.remaining, f.rate) < kFinishSlackNs) {
      Finish(f);
      it = flows_.erase(it);
    } else {
      ++it;
    }
  }
  Recompute();
  ScheduleNextDrain();
}

void FlowNetwork::Finish(Flow& f) {
  f.rate = 0;
  q_.After(f.latency, std::move(f.done));
}

}  // namespace kp
