#include "planner/space_search.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "common/clock.h"
#include "planner/constraints.h"
#include "planner/schedule_model.h"
#include "planner/search.h"

namespace kp {

namespace {

constexpr Recompute kRecomputes[] = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
constexpr int kCpChoices[] = {1, 2, 4, 8, 16};

// Divisors of n up to `limit`, ascending; O(sqrt n), as n can be a batch
// of a million sequences.
std::vector<int> Divisors(long long n, long long limit) {
  std::vector<int> low, high;
  for (long long d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    if (d <= limit) low.push_back(static_cast<int>(d));
    if (d != n / d && n / d <= limit) high.push_back(static_cast<int>(n / d));
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

struct SchedulePick {
  ScheduleKind kind;
  int vp;
};

// The vp values the layout search always tried (2 to 6, and 8) and every
// other that cuts the layers, or torchtitan's layers + 2 units, into pp x vp
// equal stages; a split rule that cannot build one refuses it later.
std::vector<int> VpChoices(int layers, int pp) {
  std::vector<int> out;
  for (int vp = 2; pp * vp <= layers; ++vp)
    if (vp <= 6 || vp == 8 || layers % (pp * vp) == 0 || (layers + 2) % (pp * vp) == 0) out.push_back(vp);
  return out;
}

std::vector<SchedulePick> SchedulesFor(const std::vector<ScheduleKind>& kinds, int layers, int pp) {
  if (pp == 1) return {{ScheduleKind::k1F1B, 1}};
  std::vector<SchedulePick> out;
  for (ScheduleKind k : kinds) {
    if (!ScheduleTakesVp(k)) out.push_back({k, 1});
    else
      for (int vp : VpChoices(layers, pp)) out.push_back({k, vp});
  }
  return out;
}

// What orders and dominates candidates, without the evaluation.
struct Point {
  Seconds time;
  std::int64_t gpus = 0;
  Bytes headroom;
  PlanKnobs knobs;
  ParallelPlan plan;
  LayerSplitKind split = LayerSplitKind::kEven;

  auto Key() const {
    return std::make_tuple(time, gpus, Bytes() - headroom, int(knobs.placement), knobs.rollout_gpus, plan.tp, plan.cp,
                           plan.pp, plan.dp, plan.ep, plan.etp, plan.vp, int(knobs.schedule), int(split),
                           knobs.micro_batch, int(knobs.recompute), int(knobs.recompute_method),
                           knobs.recompute_layers);
  }
};

Point PointOf(const SpaceCandidate& c) {
  return {c.step_time(), c.actor_gpus, c.headroom, c.knobs, c.evaluation.plan, c.evaluation.layer_split.kind};
}

bool Less(const Point& a, const Point& b) { return a.Key() < b.Key(); }

// a beats b on the front whose second axis `fewer_gpus` picks: as good on
// both axes and better on one, or equal on both and first in the order.
bool Beats(const Point& a, const Point& b, bool fewer_gpus) {
  const bool second_ge = fewer_gpus ? a.gpus <= b.gpus : a.headroom >= b.headroom;
  const bool second_eq = fewer_gpus ? a.gpus == b.gpus : a.headroom == b.headroom;
  if (!(a.time <= b.time && second_ge)) return false;
  if (a.time < b.time || !second_eq) return true;
  return Less(a, b);
}

// The top list and the two fronts as the search fills them.
class Results {
 public:
  explicit Results(int top) : top_(top) {}

  // True when no point at least `floor` slow on `gpus` GPUs with at most
  // `headroom_ceiling` left can enter the top list or either front: each
  // is beaten, strictly faster, by a plan already found.
  bool Useless(Seconds floor, std::int64_t gpus, Bytes headroom_ceiling) const {
    if (static_cast<int>(top_list_.size()) < top_ || !(top_list_.back().step_time() < floor)) return false;
    const bool gpus_beaten = std::any_of(front_gpus_.begin(), front_gpus_.end(), [&](const SpaceCandidate& q) {
      return q.actor_gpus <= gpus && q.step_time() < floor;
    });
    if (!gpus_beaten) return false;
    return std::any_of(front_headroom_.begin(), front_headroom_.end(), [&](const SpaceCandidate& q) {
      return q.headroom >= headroom_ceiling && q.step_time() < floor;
    });
  }

  // Offers a feasible point; `make` builds its candidate only if it is kept.
  void Offer(const Point& p, const std::function<SpaceCandidate()>& make) {
    std::optional<SpaceCandidate> c;
    auto get = [&]() -> const SpaceCandidate& {
      if (!c) c = make();
      return *c;
    };
    if (static_cast<int>(top_list_.size()) < top_ || Less(p, PointOf(top_list_.back()))) {
      auto at = std::upper_bound(top_list_.begin(), top_list_.end(), p,
                                 [](const Point& x, const SpaceCandidate& y) { return Less(x, PointOf(y)); });
      top_list_.insert(at, get());
      if (static_cast<int>(top_list_.size()) > top_) top_list_.pop_back();
    }
    OfferFront(front_gpus_, p, true, get);
    OfferFront(front_headroom_, p, false, get);
  }

  SpaceSearchResult Take() && {
    SpaceSearchResult r;
    r.top = std::move(top_list_);
    std::sort(front_gpus_.begin(), front_gpus_.end(), [](const SpaceCandidate& a, const SpaceCandidate& b) {
      return std::make_pair(a.actor_gpus, a.step_time()) < std::make_pair(b.actor_gpus, b.step_time());
    });
    std::sort(front_headroom_.begin(), front_headroom_.end(),
              [](const SpaceCandidate& a, const SpaceCandidate& b) { return a.step_time() < b.step_time(); });
    r.front_gpus = std::move(front_gpus_);
    r.front_headroom = std::move(front_headroom_);
    return r;
  }

 private:
  template <typename Get>
  static void OfferFront(std::vector<SpaceCandidate>& front, const Point& p, bool fewer_gpus, Get& get) {
    for (const SpaceCandidate& q : front)
      if (Beats(PointOf(q), p, fewer_gpus)) return;
    std::erase_if(front, [&](const SpaceCandidate& q) { return Beats(p, PointOf(q), fewer_gpus); });
    front.push_back(get());
  }

  int top_;
  std::vector<SpaceCandidate> top_list_, front_gpus_, front_headroom_;
};

// A layout that passed the structural rules and the memory floor, with
// the floor of its step time, waiting to be priced.
struct Layout {
  int placement;
  ParallelPlan plan;
  ScheduleKind schedule;
  int split;
  Seconds floor;           ///< StepTimeFloorOfLayout: no micro-batch or recompute is faster
  Bytes headroom_ceiling;  ///< the GPU less ActorMemoryFloor: no setting leaves more
};

struct PlacementCase {
  PlacementCase(Placement placement, int rollout_gpus) : knobs{} {
    knobs.placement = placement;
    knobs.rollout_gpus = rollout_gpus;
  }
  PlanKnobs knobs;
  std::optional<ParallelPlan> rollout;  ///< ChooseRollout's engine; none fits: nullopt
};

class SpaceSearch {
 public:
  SpaceSearch(const PlanRequest& req, const ParamCount& pc, const SpaceOptions& o)
      : req_(req), pc_(pc), o_(o), results_(req.top) {
    if (o_.schedules.empty())
      o_.schedules = {ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B, ScheduleKind::kZbH1,
                      ScheduleKind::kZbH2, ScheduleKind::kZbv, ScheduleKind::kDualPipeV};
    if (o_.splits.empty()) o_.splits = {{LayerSplitKind::kEven, {}}, {LayerSplitKind::kMegatron, {}}};
    placements_.emplace_back(Placement::kColocated, 0);
    for (int pool : RolloutPoolSizes(req.world())) placements_.emplace_back(Placement::kSplit, pool);
    for (PlacementCase& c : placements_) {
      working_.push_back(ApplyKnobs(req_, c.knobs, req_.plan, req_.layer_split));
      c.rollout = ChooseRollout(working_.back(), pc_);
    }
  }

  SpaceSearchResult Run() {
    Stopwatch watch;
    for (size_t i = 0; i < placements_.size(); ++i) VisitPlacement(static_cast<int>(i));
    // Cheapest floors first: fast plans found early make the floors of the
    // rest bite. The order changes what is pruned, never the results.
    std::stable_sort(layouts_.begin(), layouts_.end(),
                     [](const Layout& a, const Layout& b) { return a.floor < b.floor; });
    for (size_t i = 0; i < layouts_.size(); ++i) {
      PriceLayout(layouts_[i]);
      if (o_.progress && i % 4096 == 0) o_.progress(double(i) / layouts_.size());
    }
    if (o_.progress) o_.progress(1.0);
    SpaceSearchResult out = std::move(results_).Take();
    out.counts = counts_;
    out.seconds = watch.Seconds();
    return out;
  }

 private:
  // The request of placement `i` with the given settings; one per
  // placement, reused, so that no point copies the model.
  PlanRequest& Working(int i, ScheduleKind schedule, int split, int micro_batch) {
    PlanRequest& r = working_[i];
    r.schedule = schedule;
    r.layer_split = o_.splits[split];
    r.micro_batch = micro_batch;
    return r;
  }

  const std::optional<StageSplit>& SplitOf(int pp, int spr, int split) {
    auto key = std::make_tuple(pp, spr, split);
    auto it = splits_.find(key);
    if (it == splits_.end()) {
      Result<StageSplit> s = SplitLayers(o_.splits[split], req_.model.layers, pp, spr);
      it = splits_.emplace(key, s.ok() ? std::optional<StageSplit>(*s) : std::nullopt).first;
    }
    return it->second;
  }

  void VisitPlacement(int i) {
    const PlacementCase& c = placements_[i];
    const ModelSpec& m = req_.model;
    const std::int64_t gpus = req_.world() - (c.knobs.placement == Placement::kSplit ? c.knobs.rollout_gpus : 0);
    for (int tp : Divisors(req_.gpus_per_node, req_.gpus_per_node))
      for (int cp : kCpChoices) {
        if (gpus % (tp * cp) != 0) continue;
        for (int pp : Divisors(gpus / (tp * cp), m.layers + 2)) {
          ParallelPlan p;
          p.tp = tp; p.cp = cp; p.pp = pp; p.dp = static_cast<int>(gpus / (std::int64_t{tp} * cp * pp));
          if (c.rollout) {
            p.rollout_tp = c.rollout->rollout_tp; p.rollout_ep = c.rollout->rollout_ep; p.rollout_dp = c.rollout->rollout_dp;
          }
          VisitSizes(i, p);
        }
      }
  }

  // Every ep, etp, schedule, split, micro-batch and recompute of one
  // tp x cp x pp x dp.
  void VisitSizes(int i, ParallelPlan p) {
    const ModelSpec& m = req_.model;
    const long long seqs = req_.sequences();
    const std::vector<int> mbs = seqs % p.dp == 0 ? Divisors(seqs / p.dp, seqs) : std::vector<int>{1};
    const std::vector<int> eps = m.is_moe() ? Divisors(m.moe.num_experts, 1LL * p.tp * p.dp * p.cp) : std::vector<int>{1};
    const std::vector<int> etps = m.is_moe() ? Divisors(p.tp, p.tp) : std::vector<int>{1};
    const long long per_layout = static_cast<long long>(mbs.size()) * 3;
    const std::vector<SchedulePick> schedules = SchedulesFor(o_.schedules, m.layers, p.pp);
    for (int ep : eps)
      for (int etp : etps)
        for (const SchedulePick& s : schedules)
          for (int split = 0; split < static_cast<int>(o_.splits.size()); ++split) {
            p.ep = ep; p.etp = etp; p.vp = s.vp;
            counts_.considered += per_layout;
            if (!placements_[i].rollout) {
              counts_.pruned_memory += per_layout;
              continue;
            }
            VisitLayout(i, p, s.kind, split, mbs);
          }
  }

  // The rules of CheckPlan that no micro-batch size changes, on integers.
  bool LayoutBreaksRules(const ParallelPlan& p, ScheduleKind kind, int split) {
    const ModelSpec& m = req_.model;
    if (m.heads % p.tp != 0) return true;
    if (has_mha_ && m.kv_heads % p.tp != 0 && p.tp % m.kv_heads != 0) return true;
    if (m.is_moe() && ((1LL * p.tp * p.dp * p.cp) % (1LL * p.ep * p.etp) != 0 || m.moe.expert_ffn % p.etp != 0))
      return true;
    if (p.cp > 1 && req_.seq_length() % (2 * p.cp) != 0) return true;
    if (req_.sequences() % p.dp != 0) return true;
    return !SplitOf(p.pp, StagesPerRank(kind, p.vp), split).has_value();
  }

  bool BatchBreaksRules(const ParallelPlan& p, ScheduleKind kind, int mb) const {
    const long long seqs = req_.sequences();
    if (seqs % (1LL * p.dp * mb) != 0) return true;
    const long long count = seqs / (1LL * p.dp * mb);
    if (kind == ScheduleKind::kInterleaved1F1B && p.vp > 1 && count % p.pp != 0) return true;
    return ScheduleIsVShaped(kind) && count < 2LL * p.pp;
  }

  void VisitLayout(int i, const ParallelPlan& p, ScheduleKind kind, int split, const std::vector<int>& mbs) {
    const long long per_layout = static_cast<long long>(mbs.size()) * 3;
    if (!o_.prune) {
      for (int mb : mbs)
        for (Recompute rc : kRecomputes) {
          PlanRequest& r = Working(i, kind, split, mb);
          r.recompute = rc;
          if (!CheckPlan(r, p).empty()) {
            ++counts_.pruned_constraints;
            continue;
          }
          Price(r, p, split);
        }
      return;
    }
    if (LayoutBreaksRules(p, kind, split)) {
      counts_.pruned_constraints += per_layout;
      return;
    }
    PlanRequest& r = Working(i, kind, split, mbs.front());
    const StageSplit& stages = *SplitOf(p.pp, StagesPerRank(kind, p.vp), split);
    const Bytes floor = ActorMemoryFloor(r, p, stages, pc_);
    if (floor > r.gpu.memory) {
      counts_.pruned_memory += per_layout;
      return;
    }
    layouts_.push_back({i, p, kind, split, StepTimeFloorOfLayout(r, p, stages, pc_), r.gpu.memory - floor});
  }

  // Every micro-batch size and recompute setting of a layout, each priced
  // unless a floor on its step time, or that time itself, says no result
  // can use it; the memory model runs last, on what is left.
  void PriceLayout(const Layout& l) {
    const long long seqs = req_.sequences();
    const std::vector<int> mbs = Divisors(seqs / l.plan.dp, seqs);
    const std::int64_t gpus = working_[l.placement].actor_gpus();
    if (results_.Useless(l.floor, gpus, l.headroom_ceiling)) {
      counts_.pruned_time += static_cast<long long>(mbs.size()) * 3;
      return;
    }
    for (int mb : mbs) {
      if (BatchBreaksRules(l.plan, l.schedule, mb)) {
        counts_.pruned_constraints += 3;
        continue;
      }
      PlanRequest& r = Working(l.placement, l.schedule, l.split, mb);
      Seconds floor;
      for (Recompute rc : kRecomputes) {
        if (rc != Recompute::kNone && results_.Useless(floor, gpus, l.headroom_ceiling)) {
          ++counts_.pruned_time;
          continue;
        }
        r.recompute = rc;
        const StageSplit& stages = *SplitOf(l.plan.pp, StagesPerRank(l.schedule, l.plan.vp), l.split);
        const StepTime t = EstimateStepTime(r, l.plan, stages, pc_, &stage_costs_);
        if (rc == Recompute::kNone) floor = t.total_floor;
        if (results_.Useless(t.total, gpus, l.headroom_ceiling)) {
          ++counts_.pruned_time;
          continue;
        }
        Offer(r, l.plan, l.split, t);
      }
    }
  }

  // Prices one point (brute force).
  void Price(const PlanRequest& r, const ParallelPlan& p, int split) {
    const StageSplit& stages = *SplitOf(p.pp, StagesPerRank(r.schedule, p.vp), split);
    Offer(r, p, split, EstimateStepTime(r, p, stages, pc_, &stage_costs_));
  }

  // Prices the point's memory and offers it to the results when it fits.
  void Offer(const PlanRequest& r, const ParallelPlan& p, int split, const StepTime& step) {
    ++counts_.evaluated;
    const StageSplit& stages = *SplitOf(p.pp, StagesPerRank(r.schedule, p.vp), split);
    MemoryReport mem = EstimateMemory(r, p, stages, pc_);
    if (!mem.feasible()) return;
    ++counts_.feasible;
    Point pt;
    pt.time = step.total;
    pt.gpus = r.actor_gpus();
    pt.headroom = MemoryHeadroom(r, mem);
    pt.knobs = KnobsOf(r);
    pt.plan = p;
    pt.split = o_.splits[split].kind;
    auto make = [&] {
      SpaceCandidate c;
      c.knobs = pt.knobs;
      c.actor_gpus = pt.gpus;
      c.headroom = pt.headroom;
      c.evaluation.plan = p;
      c.evaluation.layer_split = o_.splits[split];
      c.evaluation.split = stages;
      c.evaluation.memory = mem;
      c.evaluation.step = step;
      return c;
    };
    if (o_.each_feasible) o_.each_feasible(make());
    results_.Offer(pt, make);
  }

  const PlanRequest& req_;
  const ParamCount& pc_;
  SpaceOptions o_;
  Results results_;
  SpaceCounts counts_;
  std::vector<PlacementCase> placements_;
  std::vector<PlanRequest> working_;
  std::map<std::tuple<int, int, int>, std::optional<StageSplit>> splits_;
  std::vector<Layout> layouts_;
  bool has_mha_ = req_.model.count(AttentionKind::kMha) > 0;
  StageCostCache stage_costs_;
};

}  // namespace

Bytes MemoryHeadroom(const PlanRequest& r, const MemoryReport& m) {
  if (r.placement == Placement::kColocated)
    return r.gpu.memory - std::max({m.phases.train, m.phases.reference, m.phases.rollout});
  return r.gpu.memory - (m.actor.total() + m.reference.weights);
}

PlanKnobs KnobsOf(const PlanRequest& r) {
  PlanKnobs k;
  k.schedule = r.schedule;
  k.micro_batch = r.micro_batch;
  k.recompute = r.recompute;
  k.recompute_method = r.recompute_method;
  k.recompute_layers = r.recompute_layers;
  k.placement = r.placement;
  k.rollout_gpus = r.placement == Placement::kSplit ? r.rollout_gpus : 0;
  return k;
}

PlanRequest ApplyKnobs(const PlanRequest& base, const PlanKnobs& k, const ParallelPlan& plan, const LayerSplit& split) {
  PlanRequest r = base;
  r.schedule = k.schedule;
  r.micro_batch = k.micro_batch;
  r.recompute = k.recompute;
  r.recompute_method = k.recompute_method;
  r.recompute_layers = k.recompute_layers;
  r.placement = k.placement;
  r.rollout_gpus = k.rollout_gpus;
  r.plan = plan;
  r.layer_split = split;
  r.search = false;
  return r;
}

std::vector<int> RolloutPoolSizes(std::int64_t world) {
  std::vector<int> out;
  for (std::int64_t g = 1; g < world; g *= 2) out.push_back(static_cast<int>(g));
  for (int k = 1; k < 8; ++k)
    if (world * k % 8 == 0) out.push_back(static_cast<int>(world * k / 8));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

SpaceSearchResult SearchSpace(const PlanRequest& req, const ParamCount& pc, const SpaceOptions& options) {
  return SpaceSearch(req, pc, options).Run();
}

}  // namespace kp
