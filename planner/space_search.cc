#include "planner/space_search.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "common/clock.h"
#include "planner/constraints.h"
#include "planner/schedule_model.h"
#include "planner/search.h"

namespace kp {

namespace {

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

// One recompute setting of the space.
struct RecomputeSetting {
  Recompute rc = Recompute::kNone;
  RecomputeMethod method = RecomputeMethod::kUniform;
  int layers = 1;
  void ApplyTo(PlanRequest& r) const {
    r.recompute = rc;
    r.recompute_method = method;
    r.recompute_layers = layers;
  }
};

int LargestChunk(const StageSplit& split) {
  int most = 0;
  for (const StageLayers& s : split.stages) most = std::max(most, s.layer_count());
  return most;
}

// The settings of a layout whose largest chunk (stage) holds `chunk`
// layers: none, selective, full (uniform 1), block 1 to chunk - 1 and
// uniform 2 to chunk. Block N >= chunk recomputes what full does, and
// uniform N > chunk keeps what uniform chunk keeps.
std::vector<RecomputeSetting> RecomputeSettings(int chunk) {
  std::vector<RecomputeSetting> out = {{Recompute::kNone}, {Recompute::kSelective}, {Recompute::kFull}};
  for (int n = 1; n < chunk; ++n) out.push_back({Recompute::kFull, RecomputeMethod::kBlock, n});
  for (int n = 2; n <= chunk; ++n) out.push_back({Recompute::kFull, RecomputeMethod::kUniform, n});
  return out;
}

long long RecomputeCount(int chunk) { return 3 + 2LL * std::max(0, chunk - 1); }

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
                           knobs.recompute_layers, int(knobs.dispatcher), knobs.a2a_overlap);
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
  ParallelPlan plan;
  SchedulePick schedule;
  int split;
  int exchange;            ///< in SpaceSearch's exchanges
  SyncTerms sync;          ///< SyncTermsOf: what every setting adds
  Seconds floor;           ///< SyncFloor + the least WorkFloor of its micro-batch sizes
  Bytes headroom_ceiling;  ///< HeadroomCeiling: no setting leaves more
};

struct PlacementCase {
  PlacementCase(Placement placement, int rollout_gpus, std::optional<ParallelPlan> engine) : knobs{}, rollout(engine) {
    knobs.placement = placement;
    knobs.rollout_gpus = rollout_gpus;
  }
  PlanKnobs knobs;
  std::optional<ParallelPlan> rollout;  ///< ChooseRollout's engine; none fits: nullopt
};

// The split placement's pools, each with ChooseRollout's engine: the first
// fitting engine (in its order of preference) whose size divides the pool.
std::vector<std::pair<int, ParallelPlan>> RolloutPools(const PlanRequest& req, const ParamCount& pc) {
  const std::int64_t world = req.world();
  if (world < 2) return {};
  PlanRequest split = req;
  split.placement = Placement::kSplit;
  split.rollout_gpus = 1;
  const std::vector<ParallelPlan> engines = FittingRollouts(split, pc, world - 1);
  std::vector<int> engine_of(world, -1);  // the pool's engine in `engines`
  for (size_t e = 0; e < engines.size(); ++e)
    for (std::int64_t g = engines[e].rollout_gpus_per_engine(); g < world; g += engines[e].rollout_gpus_per_engine())
      if (engine_of[g] < 0) engine_of[g] = static_cast<int>(e);
  std::vector<std::pair<int, ParallelPlan>> out;
  for (std::int64_t g = 1; g < world; ++g)
    if (engine_of[g] >= 0) out.emplace_back(static_cast<int>(g), engines[engine_of[g]]);
  return out;
}

// What a layout's work per sequence depends on: tp, cp, ep, etp, the
// micro-batch size and the exchange (looked up for every layout and
// micro-batch size, so hashed).
using WorkKey = std::tuple<int, int, int, int, int, int>;
struct WorkKeyHash {
  std::size_t operator()(const WorkKey& k) const {
    std::size_t h = 0;
    std::apply([&h](auto... v) { ((h = h * 1000003u ^ std::hash<int>()(v)), ...); }, k);
    return h;
  }
};

class SpaceSearch {
 public:
  SpaceSearch(const PlanRequest& req, const ParamCount& pc, const SpaceOptions& o)
      : req_(req), pc_(pc), o_(o), results_(req.top) {
    if (o_.schedules.empty())
      o_.schedules = {ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B, ScheduleKind::kZbH1,
                      ScheduleKind::kZbH2, ScheduleKind::kZbv, ScheduleKind::kDualPipeV};
    if (o_.splits.empty()) o_.splits = {{LayerSplitKind::kEven, {}}, {LayerSplitKind::kMegatron, {}}};
    PlanRequest colocated = req_;
    colocated.placement = Placement::kColocated;
    placements_.emplace_back(Placement::kColocated, 0, ChooseRollout(colocated, pc_));
    for (const auto& [pool, engine] : RolloutPools(req_, pc_)) placements_.emplace_back(Placement::kSplit, pool, engine);
    // The overlapped exchanges first: usually the fastest, so their plans
    // make the floors of the rest bite.
    exchanges_ = ExchangeChoices(req_, o_.dispatchers, o_.a2a_overlaps);
    std::stable_partition(exchanges_.begin(), exchanges_.end(), [](const ExchangeChoice& e) { return e.a2a_overlap; });
    for (size_t x = 0; x < exchanges_.size(); ++x) stage_costs_.push_back(std::make_unique<StageCostCache>());
  }

  SpaceSearchResult Run() {
    Stopwatch watch;
    // Placement by placement, the most actor GPUs first (colocated, then
    // the smallest pools), where the fastest plans usually are; in each,
    // the cheapest floors first. Fast plans found early make the floors of
    // the rest bite; the order changes what is pruned, never the results.
    for (size_t i = 0; i < placements_.size(); ++i) {
      work_ = ApplyKnobs(req_, placements_[i].knobs, req_.plan, req_.layer_split);
      layouts_.clear();
      VisitPlacement(static_cast<int>(i));
      std::stable_sort(layouts_.begin(), layouts_.end(),
                       [](const Layout& a, const Layout& b) { return a.floor < b.floor; });
      for (const Layout& l : layouts_) PriceLayout(l);
      if (o_.progress) o_.progress(double(i + 1) / placements_.size());
    }
    SpaceSearchResult out = std::move(results_).Take();
    out.counts = counts_;
    out.seconds = watch.Seconds();
    return out;
  }

 private:
  // The request of the placement being searched with the given settings,
  // reused, so that no point copies the model.
  PlanRequest& Working(ScheduleKind schedule, int split, int micro_batch, int exchange) {
    PlanRequest& r = work_;
    r.schedule = schedule;
    r.layer_split = o_.splits[split];
    r.micro_batch = micro_batch;
    r.recipe.dispatcher = exchanges_[exchange].dispatcher;
    r.recipe.a2a_overlap = exchanges_[exchange].a2a_overlap;
    return r;
  }

  long long Exchanges() const { return static_cast<long long>(exchanges_.size()); }

  // A split rule's stages on pp ranks of spr stages each, if it can build
  // them, with the layers of the largest (the recompute counts' range).
  struct SplitEntry {
    std::optional<StageSplit> stages;
    int largest_chunk = 1;  ///< 1 when there are no stages: the plain settings only
    long long recompute_settings() const { return RecomputeCount(largest_chunk); }
  };
  const SplitEntry& SplitOf(int pp, int spr, int split) {
    auto key = std::make_tuple(pp, spr, split);
    auto it = splits_.find(key);
    if (it == splits_.end()) {
      SplitEntry e;
      if (Result<StageSplit> s = SplitLayers(o_.splits[split], req_.model.layers, pp, spr, req_.model.mtp_layers);
          s.ok()) {
        e.stages = *s;
        e.largest_chunk = LargestChunk(*s);
      }
      it = splits_.emplace(key, std::move(e)).first;
    }
    return it->second;
  }

  // The recompute settings of a layout of schedule `s` and split rule `split`
  // on pp ranks: RecomputeSettings of its largest chunk, or the three
  // plain ones when the rule cannot build its stages.
  int RecomputeCountOf(int pp, const SchedulePick& s, int split) {
    return SplitOf(pp, StagesPerRank(s.kind, s.vp), split).recompute_settings();
  }

  // Schedules of a pipeline of pp ranks, and the settings their layouts
  // have per (ep, etp, micro-batch) together: one entry per pp.
  struct PipelineChoices {
    std::vector<SchedulePick> schedules;
    long long settings = 0;  ///< the sum over schedules and split rules of RecomputeCountOf, times the exchanges
  };
  const PipelineChoices& ChoicesOf(int pp) {
    if (static_cast<int>(pipelines_.size()) <= pp) pipelines_.resize(pp + 1);
    std::optional<PipelineChoices>& c = pipelines_[pp];
    if (!c) {
      c.emplace();
      c->schedules = SchedulesFor(o_.schedules, req_.model.layers, pp);
      for (const SchedulePick& s : c->schedules)
        for (int split = 0; split < static_cast<int>(o_.splits.size()); ++split)
          c->settings += RecomputeCountOf(pp, s, split) * Exchanges();
    }
    return *c;
  }

  // The parameters of each rank of a layout before TP and EP cut them:
  // shared by every layout of the same pipeline shape and split.
  const std::vector<RankParamSums>& SumsOf(int pp, const SchedulePick& s, int split, const StageSplit& stages) {
    const int spr = StagesPerRank(s.kind, s.vp);
    auto key = std::make_tuple(pp, spr, ScheduleIsVShaped(s.kind), split);
    auto it = sums_.find(key);
    if (it == sums_.end()) {
      std::vector<RankParamSums> ranks;
      for (int rank = 0; rank < pp; ++rank)
        ranks.push_back(ParamSumsOfRank(req_, stages, pc_, StagesOfRank(s.kind, pp, spr, rank)));
      it = sums_.emplace(key, std::move(ranks)).first;
    }
    return it->second;
  }

  // DistinctRanks of a pipeline shape and split: the ranks a step prices.
  // Sets the working request's schedule, split and micro-batch.
  const std::vector<int>& DistinctOf(const ParallelPlan& p, const SchedulePick& s, int split, const StageSplit& stages) {
    const int spr = StagesPerRank(s.kind, s.vp);
    auto key = std::make_tuple(p.pp, spr, ScheduleIsVShaped(s.kind), split);
    auto it = distinct_.find(key);
    if (it == distinct_.end()) {
      PlanRequest& r = Working(s.kind, split, 1, 0);
      it = distinct_.emplace(key, DistinctRanks(r, p, stages, pc_, *stage_costs_[0])).first;
    }
    return it->second;
  }

  void VisitPlacement(int i) {
    const PlacementCase& c = placements_[i];
    const ModelSpec& m = req_.model;
    const std::int64_t gpus = work_.actor_gpus();
    for (int tp : Divisors(req_.gpus_per_node, req_.gpus_per_node)) {
      const bool tp_ok = m.heads % tp == 0 && !(has_mha_ && m.kv_heads % tp != 0 && tp % m.kv_heads != 0);
      for (int cp : kCpChoices) {
        if (gpus % (tp * cp) != 0) continue;
        const bool cp_ok = cp == 1 || req_.seq_length() % (2 * cp) == 0;
        for (int pp : Divisors(gpus / (tp * cp), m.layers + 2)) {
          ParallelPlan p;
          p.tp = tp; p.cp = cp; p.pp = pp; p.dp = static_cast<int>(gpus / (std::int64_t{tp} * cp * pp));
          if (c.rollout) {
            p.rollout_tp = c.rollout->rollout_tp; p.rollout_ep = c.rollout->rollout_ep; p.rollout_dp = c.rollout->rollout_dp;
          }
          VisitSizes(i, p, tp_ok && cp_ok);
        }
      }
    }
  }

  // Every ep, etp, schedule, split, micro-batch and recompute setting of
  // one tp x cp x pp x dp. `sizes_ok`: tp and cp pass their rules.
  void VisitSizes(int i, ParallelPlan p, bool sizes_ok) {
    const ModelSpec& m = req_.model;
    const long long seqs = req_.sequences();
    const std::vector<int> mbs = seqs % p.dp == 0 ? Divisors(seqs / p.dp, seqs) : std::vector<int>{1};
    const std::vector<int> eps = m.is_moe() ? Divisors(m.moe.num_experts, 1LL * p.tp * p.dp * p.cp) : std::vector<int>{1};
    const std::vector<int> etps = m.is_moe() ? Divisors(p.tp, p.tp) : std::vector<int>{1};
    const PipelineChoices& choices = ChoicesOf(p.pp);
    const long long per_setting = static_cast<long long>(mbs.size() * eps.size() * etps.size());
    // A whole tp x cp x pp x dp at once, where a rule no ep, etp, schedule
    // or split changes is broken, or no rollout engine fits.
    if (o_.prune || !placements_[i].rollout) {
      const long long all = per_setting * choices.settings;
      if (!placements_[i].rollout) {
        counts_.considered += all;
        counts_.pruned_memory += all;
        return;
      }
      if (!sizes_ok || seqs % p.dp != 0) {
        counts_.considered += all;
        counts_.pruned_constraints += all;
        return;
      }
    }
    // The ep x etp that fold into the layout (Megatron's MoE folding, the
    // expert width: CheckPlan's rules no schedule, split or micro-batch
    // size changes, on integers), each with its work floor once a layout
    // needs it.
    struct Experts {
      int ep, etp;
      std::vector<std::optional<Seconds>> work;  ///< per exchange
    };
    std::vector<Experts> experts;
    for (int ep : eps)
      for (int etp : etps)
        if (!m.is_moe() || ((1LL * p.tp * p.dp * p.cp) % (1LL * ep * etp) == 0 && m.moe.expert_ffn % etp == 0))
          experts.push_back({ep, etp, std::vector<std::optional<Seconds>>(exchanges_.size())});
    const long long folding_broken = static_cast<long long>(eps.size() * etps.size() - experts.size());
    for (const SchedulePick& s : choices.schedules)
      for (int split = 0; split < static_cast<int>(o_.splits.size()); ++split) {
        p.vp = s.vp;
        const SplitEntry& entry = SplitOf(p.pp, StagesPerRank(s.kind, s.vp), split);
        const std::optional<StageSplit>& stages = entry.stages;
        // Per exchange: the micro-batch sizes and recompute settings.
        const long long per_layout = static_cast<long long>(mbs.size()) * entry.recompute_settings();
        if (!o_.prune) {
          for (int ep : eps)
            for (int etp : etps)
              for (int x = 0; x < Exchanges(); ++x) {
                p.ep = ep; p.etp = etp;
                counts_.considered += per_layout;
                BruteForceLayout(p, s.kind, split, mbs, x);
              }
          continue;
        }
        const long long layouts = static_cast<long long>(eps.size() * etps.size()) * Exchanges();
        counts_.considered += per_layout * layouts;
        if (!stages) {
          counts_.pruned_constraints += per_layout * layouts;
          continue;
        }
        counts_.pruned_constraints += per_layout * folding_broken * Exchanges();
        const std::vector<RankParamSums>& sums = SumsOf(p.pp, s, split, *stages);
        for (Experts& e : experts) {
          p.ep = e.ep; p.etp = e.etp;
          VisitLayout(p, s, split, sums, mbs, e.work, per_layout);
        }
      }
  }

  // ModelWork per sequence of a plan's tp, cp, ep and etp at micro-batch
  // `mb` under an exchange, remembered for the whole search.
  Seconds WorkPerSequence(const ParallelPlan& p, int mb, int exchange) {
    const WorkKey key{p.tp, p.cp, p.ep, p.etp, mb, exchange};
    auto it = sequence_work_.find(key);
    if (it == sequence_work_.end()) {
      PlanRequest& r = work_;
      const int keep_mb = r.micro_batch;
      const ExchangeChoice keep{r.recipe.dispatcher, r.recipe.a2a_overlap};
      r.micro_batch = mb;
      r.recipe.dispatcher = exchanges_[exchange].dispatcher;
      r.recipe.a2a_overlap = exchanges_[exchange].a2a_overlap;
      it = sequence_work_.emplace(key, ModelWork(r, p, pc_, stage_costs_[exchange].get()) / mb).first;
      r.micro_batch = keep_mb;
      r.recipe.dispatcher = keep.dispatcher;
      r.recipe.a2a_overlap = keep.a2a_overlap;
    }
    return it->second;
  }

  // ModelWork's floor on a micro-batch size's step less its sync terms:
  // the work of the step's sequences over the pipeline's ranks, shaved as
  // ModelWork asks.
  Seconds WorkFloor(const ParallelPlan& p, int mb, int exchange) {
    return WorkPerSequence(p, mb, exchange) * (double(req_.sequences()) / p.dp / p.pp) * (1 - 1e-9);
  }

  // A layout whose sizes, split, batch and MoE folding pass their rules,
  // under every exchange: the memory ceiling (no exchange changes it), then
  // each exchange's step-time floors: the work floor alone, then with the
  // sync and optimizer terms, which cost a few collectives' prices.
  void VisitLayout(const ParallelPlan& p, const SchedulePick& s, int split,
                   const std::vector<RankParamSums>& sums, const std::vector<int>& mbs,
                   std::vector<std::optional<Seconds>>& work, long long per_layout) {
    ranks_.clear();
    for (const RankParamSums& x : sums) ranks_.push_back(ShardParams(x, p));
    PlanRequest& r = Working(s.kind, split, 1, 0);
    const Bytes ceiling = HeadroomCeiling(r, p, ranks_);
    if (ceiling < Bytes(0)) {
      counts_.pruned_memory += per_layout * Exchanges();
      return;
    }
    std::optional<SyncTerms> sync;
    for (int x = 0; x < Exchanges(); ++x) {
      if (OverlapBreaksLayout(p, s.kind, x)) {
        counts_.pruned_constraints += per_layout;
        continue;
      }
      if (!work[x]) {
        work[x] = WorkFloor(p, mbs.front(), x);
        for (int mb : mbs) work[x] = std::min(*work[x], WorkFloor(p, mb, x));
      }
      if (results_.Useless(*work[x], r.actor_gpus(), ceiling)) {
        counts_.pruned_time += per_layout;
        continue;
      }
      if (!sync) sync = SyncTermsOf(r, p, ranks_);
      const Seconds floor = SyncFloor(*sync) + *work[x];
      if (results_.Useless(floor, r.actor_gpus(), ceiling)) {
        counts_.pruned_time += per_layout;
        continue;
      }
      layouts_.push_back({p, s, split, x, *sync, floor, ceiling});
    }
  }

  // Megatron overlaps the expert exchange only with ep > 1 and a pipeline
  // of one rank or an interleaved one (CheckPlan's rule on the layout).
  bool OverlapBreaksLayout(const ParallelPlan& p, ScheduleKind kind, int exchange) const {
    return exchanges_[exchange].a2a_overlap && (p.ep < 2 || (p.pp > 1 && kind != ScheduleKind::kInterleaved1F1B));
  }

  bool BatchBreaksRules(const ParallelPlan& p, ScheduleKind kind, int mb) const {
    const long long seqs = req_.sequences();
    if (seqs % (1LL * p.dp * mb) != 0) return true;
    const long long count = seqs / (1LL * p.dp * mb);
    if (kind == ScheduleKind::kInterleaved1F1B && p.vp > 1 && count % p.pp != 0) return true;
    return ScheduleIsVShaped(kind) && count < 2LL * p.pp;
  }

  // Every micro-batch size and recompute setting of a layout checked with
  // CheckPlan and priced: the brute force.
  void BruteForceLayout(const ParallelPlan& p, ScheduleKind kind, int split, const std::vector<int>& mbs,
                        int exchange) {
    const SplitEntry& entry = SplitOf(p.pp, StagesPerRank(kind, p.vp), split);
    for (int mb : mbs)
      for (const RecomputeSetting& rc : RecomputeSettings(entry.largest_chunk)) {
        PlanRequest& r = Working(kind, split, mb, exchange);
        rc.ApplyTo(r);
        if (!CheckPlan(r, p).empty()) {
          ++counts_.pruned_constraints;
          continue;
        }
        Offer(r, p, split, EstimateStepTime(r, p, *entry.stages, pc_, stage_costs_[exchange].get()));
      }
  }

  // Every micro-batch size and recompute setting of a layout, each priced
  // unless a floor on its step time, or that time itself, says no result
  // can use it; the memory model runs last, on what is left.
  void PriceLayout(const Layout& l) {
    const long long seqs = req_.sequences();
    const std::vector<int> mbs = Divisors(seqs / l.plan.dp, seqs);
    const SplitEntry& entry = SplitOf(l.plan.pp, StagesPerRank(l.schedule.kind, l.schedule.vp), l.split);
    const StageSplit& stages = *entry.stages;
    const int chunk = entry.largest_chunk;
    const long long settings = RecomputeCount(chunk);
    const int x = l.exchange;
    const std::int64_t gpus = work_.actor_gpus();
    if (results_.Useless(l.floor, gpus, l.headroom_ceiling)) {
      counts_.pruned_time += static_cast<long long>(mbs.size()) * settings;
      return;
    }
    ranks_.clear();
    for (const RankParamSums& x : SumsOf(l.plan.pp, l.schedule, l.split, stages)) ranks_.push_back(ShardParams(x, l.plan));
    const Seconds sync_floor = SyncFloor(l.sync);
    const std::vector<int>& priced_ranks = DistinctOf(l.plan, l.schedule, l.split, stages);  // before Working below
    for (int mb : mbs) {
      if (BatchBreaksRules(l.plan, l.schedule.kind, mb)) {
        counts_.pruned_constraints += settings;
        continue;
      }
      if (results_.Useless(sync_floor + WorkFloor(l.plan, mb, x), gpus, l.headroom_ceiling)) {
        counts_.pruned_time += settings;
        continue;
      }
      PriceRecomputes(l, Working(l.schedule.kind, l.split, mb, x), stages, chunk, priced_ranks);
    }
  }

  // The recompute settings of one layout and micro-batch size. Without
  // recomputation first: its StepTime::total_floor bounds every other
  // setting; then block 1, 2, ..., full and uniform N, each recomputing
  // every layer at least as much as the one before, so that each one's
  // floor bounds the rest of the chain (uniform N's step is full's).
  void PriceRecomputes(const Layout& l, PlanRequest& r, const StageSplit& stages, int largest_chunk,
                       const std::vector<int>& priced_ranks) {
    const int chunk = std::max(largest_chunk, 1);
    const std::int64_t gpus = r.actor_gpus();
    auto step = [&](const RecomputeSetting& s) {
      s.ApplyTo(r);
      return EstimateStepTime(r, l.plan, stages, pc_, stage_costs_[l.exchange].get(), &l.sync, &priced_ranks);
    };
    auto consider = [&](const StepTime& t) {
      if (results_.Useless(t.total, gpus, l.headroom_ceiling)) ++counts_.pruned_time;
      else Offer(r, l.plan, l.split, t, &ranks_);
    };
    const StepTime none = step({Recompute::kNone});
    Seconds floor = none.total_floor;
    consider(none);
    // With the exchange overlapped Megatron refuses a recomputed moe module
    // and full recomputation (CheckPlan): selective at most.
    const bool overlap = r.recipe.a2a_overlap;
    if (overlap && r.recipe.recomputes(RecomputeModule::kMoe)) {
      ++counts_.pruned_constraints;
    } else if (results_.Useless(floor, gpus, l.headroom_ceiling)) {
      ++counts_.pruned_time;
    } else if (r.flash_attention) {
      // Selective recomputation redoes only the eager softmax and dropout:
      // with flash attention its step is none's, to the bit (the brute
      // force, which prices it, holds this to it).
      RecomputeSetting{Recompute::kSelective}.ApplyTo(r);
      consider(none);
    } else {
      consider(step({Recompute::kSelective}));
    }
    long long left = 2LL * (chunk - 1) + 1;  // block 1 .. chunk-1, full, uniform 2 .. chunk
    if (overlap) {
      counts_.pruned_constraints += left;
      return;
    }
    for (int n = 1; n < chunk; ++n, --left) {
      if (results_.Useless(floor, gpus, l.headroom_ceiling)) {
        counts_.pruned_time += left;
        return;
      }
      const StepTime t = step({Recompute::kFull, RecomputeMethod::kBlock, n});
      floor = std::max(floor, t.total_floor);
      consider(t);
    }
    if (results_.Useless(floor, gpus, l.headroom_ceiling)) {
      counts_.pruned_time += left;
      return;
    }
    const StepTime full = step({Recompute::kFull});
    if (results_.Useless(full.total, gpus, l.headroom_ceiling)) {
      counts_.pruned_time += left;
      return;
    }
    for (int n = 1; n <= chunk; ++n) {
      RecomputeSetting{Recompute::kFull, RecomputeMethod::kUniform, n}.ApplyTo(r);
      Offer(r, l.plan, l.split, full, &ranks_);
    }
  }

  // Prices the point's memory and offers it to the results when it fits.
  // `ranks`: the plan's ParamsOfRanks, when known.
  void Offer(const PlanRequest& r, const ParallelPlan& p, int split, const StepTime& step,
             const std::vector<RankParams>* ranks = nullptr) {
    ++counts_.evaluated;
    const StageSplit& stages = *SplitOf(p.pp, StagesPerRank(r.schedule, p.vp), split).stages;
    MemoryReport mem = EstimateMemory(r, p, stages, pc_, ranks);
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
  std::vector<ExchangeChoice> exchanges_;
  PlanRequest work_;  ///< the request of the placement being searched (Working)
  std::map<std::tuple<int, int, int>, SplitEntry> splits_;
  std::vector<std::optional<PipelineChoices>> pipelines_;
  std::map<std::tuple<int, int, bool, int>, std::vector<RankParamSums>> sums_;
  std::map<std::tuple<int, int, bool, int>, std::vector<int>> distinct_;
  std::vector<RankParams> ranks_;
  std::unordered_map<WorkKey, Seconds, WorkKeyHash> sequence_work_;
  std::vector<Layout> layouts_;
  bool has_mha_ = req_.model.count(AttentionKind::kMha) > 0;
  std::vector<std::unique_ptr<StageCostCache>> stage_costs_;  ///< per exchange: prices depend on it
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
  k.dispatcher = r.recipe.dispatcher;
  k.a2a_overlap = r.recipe.a2a_overlap;
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
  r.recipe.dispatcher = k.dispatcher;
  r.recipe.a2a_overlap = k.a2a_overlap;
  r.plan = plan;
  r.layer_split = split;
  r.search = false;
  return r;
}

std::vector<int> RolloutPoolSizes(const PlanRequest& req, const ParamCount& pc) {
  std::vector<int> out;
  for (const auto& [pool, engine] : RolloutPools(req, pc)) out.push_back(pool);
  return out;
}

std::vector<ExchangeChoice> ExchangeChoices(const PlanRequest& req, const std::vector<Dispatcher>& dispatchers,
                                            const std::vector<bool>& overlaps) {
  if (!req.model.is_moe()) return {{req.recipe.dispatcher, req.recipe.a2a_overlap}};
  // DeepEP and HybridEP are priced alike (the same fabric and NVLink
  // shares), so only the one made for the system is tried: HybridEP in an
  // NVLink domain wider than a node (NVL72), DeepEP elsewhere.
  const Dispatcher flex = req.gpu.nvlink_gpus() > req.gpus_per_node ? Dispatcher::kHybridEp : Dispatcher::kDeepEp;
  const std::vector<Dispatcher> d = dispatchers.empty() ? std::vector<Dispatcher>{Dispatcher::kAllToAll, flex}
                                                        : dispatchers;
  const std::vector<bool> o = overlaps.empty() ? std::vector<bool>{false, true} : overlaps;
  std::vector<ExchangeChoice> out;
  for (Dispatcher x : d)
    for (bool overlap : o)
      if (!overlap || req.model.mtp_layers <= 1) out.push_back({x, overlap});
  return out;
}

SpaceSearchResult SearchSpace(const PlanRequest& req, const ParamCount& pc, const SpaceOptions& options) {
  return SpaceSearch(req, pc, options).Run();
}

}  // namespace kp
