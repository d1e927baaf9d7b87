#include "planner/space_search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <limits>
#include <tuple>

#include "planner/constraints.h"
#include "planner/search.h"
#include "planner/test_util.h"

namespace kp {
namespace {

PlanRequest Small(const std::string& model, int gpus_per_node, int nodes, double memory_gb = 0) {
  PlanRequest r = model == "gpt" ? PlanRequest{} : testing::SeedRequest(model, "h100", nodes);
  if (model == "gpt") {
    r.model = testing::Gpt(8, 1024, 16, 32000);
    r.gpu = testing::Gpu("h100");
  }
  r.nodes = nodes;
  r.gpus_per_node = gpus_per_node;
  if (memory_gb > 0) r.gpu.memory = GB(memory_gb);
  r.global_batch = 16;
  r.prompt_length = 1024;
  r.response_length = 1024;
  r.top = 5;
  return r;
}

// A feasible plan's coordinates, kept from the brute force's every plan.
struct Seen {
  double time, headroom;
  std::int64_t gpus;
};

// The fronts computed here from every feasible plan by a sweep: what the
// search's own bookkeeping must give. Step time against GPUs: by GPUs, then
// time; a plan is on it when it is faster than every plan on fewer GPUs.
std::vector<std::pair<std::int64_t, double>> GpuFront(std::vector<Seen> all) {
  std::sort(all.begin(), all.end(),
            [](const Seen& a, const Seen& b) { return std::tie(a.gpus, a.time) < std::tie(b.gpus, b.time); });
  std::vector<std::pair<std::int64_t, double>> out;
  double best = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < all.size(); ++i) {
    if (i > 0 && all[i].gpus == all[i - 1].gpus) continue;  // only each GPU count's fastest
    if (all[i].time < best) out.push_back({all[i].gpus, all[i].time});
    best = std::min(best, all[i].time);
  }
  return out;
}

// Step time against headroom: by time, then most headroom first; on it
// when it leaves more than every faster plan.
std::vector<std::pair<double, double>> HeadroomFront(std::vector<Seen> all) {
  std::sort(all.begin(), all.end(), [](const Seen& a, const Seen& b) {
    return a.time != b.time ? a.time < b.time : a.headroom > b.headroom;
  });
  std::vector<std::pair<double, double>> out;
  double most = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < all.size(); ++i) {
    if (i > 0 && all[i].time == all[i - 1].time) continue;
    if (all[i].headroom > most) out.push_back({all[i].time, all[i].headroom});
    most = std::max(most, all[i].headroom);
  }
  return out;
}

template <typename F>
auto Coordinates(const std::vector<SpaceCandidate>& front, F f) {
  std::vector<decltype(f(front.front()))> out;
  for (const SpaceCandidate& c : front) out.push_back(f(c));
  std::sort(out.begin(), out.end());
  return out;
}

bool SamePlan(const SpaceCandidate& a, const SpaceCandidate& b) {
  return a.knobs == b.knobs && a.evaluation.plan == b.evaluation.plan &&
         a.evaluation.layer_split == b.evaluation.layer_split && a.step_time() == b.step_time();
}

// The pruned search against brute force (every point checked by CheckPlan
// and priced, every feasible plan kept) on one cluster, with `options`'
// schedules and splits: the same best plans in the same order, and the
// same two fronts, plan for plan. Adds what the pruning skipped to `pruning`
// and the plans on the fronts that recompute by Megatron's counts (block,
// or uniform groups of more than one layer) to `counted_on_fronts`.
void ExpectPrunedEqualsBruteForce(const PlanRequest& r, const SpaceOptions& options, SpaceCounts& pruning,
                                  int& counted_on_fronts) {
  const ParamCount pc = CountParams(r.model);
  SpaceSearchResult pruned = SearchSpace(r, pc, options);
  pruning.pruned_memory += pruned.counts.pruned_memory;
  pruning.pruned_time += pruned.counts.pruned_time;
  std::vector<Seen> seen;
  SpaceOptions brute_force = options;
  brute_force.prune = false;
  brute_force.each_feasible = [&](const SpaceCandidate& x) {
    seen.push_back({x.step_time().value(), x.headroom.value(), x.actor_gpus});
  };
  SpaceSearchResult brute = SearchSpace(r, pc, brute_force);

  EXPECT_EQ(pruned.counts.considered, brute.counts.considered);
  EXPECT_EQ(pruned.counts.considered, pruned.counts.pruned_constraints + pruned.counts.pruned_memory +
                                          pruned.counts.pruned_time + pruned.counts.evaluated);
  EXPECT_EQ(static_cast<long long>(seen.size()), brute.counts.feasible);
  ASSERT_EQ(pruned.top.size(), std::min<size_t>(r.top, seen.size()));
  if (seen.empty()) return;
  for (size_t i = 0; i < pruned.top.size(); ++i) EXPECT_TRUE(SamePlan(pruned.top[i], brute.top[i])) << i;
  // The top list's times are the smallest of every feasible plan's.
  std::vector<double> times;
  for (const Seen& x : seen) times.push_back(x.time);
  std::sort(times.begin(), times.end());
  for (size_t i = 0; i < pruned.top.size(); ++i) EXPECT_EQ(pruned.top[i].step_time().value(), times[i]) << i;

  EXPECT_EQ(Coordinates(pruned.front_gpus, [](const SpaceCandidate& x) {
              return std::make_pair(x.actor_gpus, x.step_time().value());
            }),
            GpuFront(seen));
  EXPECT_EQ(Coordinates(pruned.front_headroom, [](const SpaceCandidate& x) {
              return std::make_pair(x.step_time().value(), x.headroom.value());
            }),
            HeadroomFront(seen));
  ASSERT_EQ(pruned.front_gpus.size(), brute.front_gpus.size());
  for (size_t i = 0; i < pruned.front_gpus.size(); ++i) EXPECT_TRUE(SamePlan(pruned.front_gpus[i], brute.front_gpus[i]));
  ASSERT_EQ(pruned.front_headroom.size(), brute.front_headroom.size());
  for (size_t i = 0; i < pruned.front_headroom.size(); ++i)
    EXPECT_TRUE(SamePlan(pruned.front_headroom[i], brute.front_headroom[i]));
  for (const auto* front : {&pruned.front_gpus, &pruned.front_headroom})
    for (const SpaceCandidate& c : *front)
      counted_on_fronts += c.knobs.recompute_method == RecomputeMethod::kBlock || c.knobs.recompute_layers > 1;
}

// Every cluster of 1 to 64 GPUs (nodes of gcd(GPUs, 8) GPUs, so 13 GPUs
// are 13 nodes of one): kimi-k3-debug (MoE, KDA and MLA, attention
// residuals, 17 layers: recompute counts up to 16 per chunk) and an
// 8-layer dense GPT, each on GPUs of 80 GB and on GPUs too small for the
// unsharded states and for a colocated rollout engine (so that the memory
// ceiling and the placement check prune); every rollout pool of the split
// placement. The schedules are one of each family (1f1b, interleaved with
// its vp, zb-h2, zbv), where the rules and floors differ, and the MoE
// model's exchange is one, DeepEP overlapped (the one with the most rules:
// ep > 1, interleaving, no full recomputation), to keep the brute force of
// 256 clusters within seconds; the next test takes every exchange.
TEST(SpaceSearchTest, PrunedEqualsBruteForceUpTo64Gpus) {
  SpaceOptions options;
  options.schedules = {ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B, ScheduleKind::kZbH2, ScheduleKind::kZbv};
  options.dispatchers = {Dispatcher::kDeepEp};
  options.a2a_overlaps = {true};
  struct Variant {
    std::string model;
    double memory_gb;  ///< 0: the H100's 80 GB
  };
  const Variant variants[] = {{"kimi-k3-debug", 0}, {"kimi-k3-debug", 2.4}, {"gpt", 0}, {"gpt", 3.5}};
  SpaceCounts pruning;
  int counted = 0;
  for (int gpus = 1; gpus <= 64; ++gpus) {
    const int per_node = std::gcd(gpus, 8);
    for (const Variant& v : variants) {
      SCOPED_TRACE(v.model + " on " + std::to_string(gpus / per_node) + " x " + std::to_string(per_node) +
                   " GPUs of " + std::to_string(v.memory_gb) + " GB");
      ExpectPrunedEqualsBruteForce(Small(v.model, per_node, gpus / per_node, v.memory_gb), options, pruning, counted);
    }
  }
  // Both floors pruned somewhere, so the comparison above covers them.
  EXPECT_GT(pruning.pruned_memory, 0);
  EXPECT_GT(pruning.pruned_time, 0);
  // And recompute counts reach the fronts, so it covers them too.
  EXPECT_GT(counted, 0);
}

// Every exchange (alltoall and DeepEP, overlapped or not) searched into one
// set of results, on every cluster of 1 to 16 GPUs: the same results as
// the brute force, and plans of more than one exchange among them.
TEST(SpaceSearchTest, PrunedEqualsBruteForceOverEveryExchange) {
  SpaceOptions options;
  options.schedules = {ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B};
  SpaceCounts pruning;
  int counted = 0;
  std::set<std::pair<int, bool>> exchanges_on_top;
  for (int gpus = 1; gpus <= 16; ++gpus) {
    const int per_node = std::gcd(gpus, 8);
    for (double memory_gb : {0.0, 2.4}) {
      SCOPED_TRACE(std::to_string(gpus) + " GPUs of " + std::to_string(memory_gb) + " GB");
      const PlanRequest r = Small("kimi-k3-debug", per_node, gpus / per_node, memory_gb);
      ExpectPrunedEqualsBruteForce(r, options, pruning, counted);
      for (const SpaceCandidate& c : SearchSpace(r, CountParams(r.model), options).top)
        exchanges_on_top.insert({int(c.knobs.dispatcher), c.knobs.a2a_overlap});
    }
  }
  EXPECT_GT(pruning.pruned_time, 0);
  EXPECT_GE(exchanges_on_top.size(), 2u);
}

// The exchanges of the space: alltoall and the system's flex dispatcher,
// with and without overlap, for an MoE model; without overlap where it has
// more than one MTP layer (Megatron's rule); the filters applied; a dense
// model keeps its own.
TEST(SpaceSearchTest, ExchangeChoicesFollowMegatronsRules) {
  PlanRequest r = Small("kimi-k3-debug", 8, 1);
  r.model.mtp_layers = 1;
  EXPECT_EQ(ExchangeChoices(r),
            (std::vector<ExchangeChoice>{{Dispatcher::kAllToAll, false}, {Dispatcher::kAllToAll, true},
                                         {Dispatcher::kDeepEp, false}, {Dispatcher::kDeepEp, true}}));
  EXPECT_EQ(ExchangeChoices(r, {Dispatcher::kHybridEp}),
            (std::vector<ExchangeChoice>{{Dispatcher::kHybridEp, false}, {Dispatcher::kHybridEp, true}}));
  EXPECT_EQ(ExchangeChoices(r, {}, {true}).size(), 2u);
  r.model.mtp_layers = 2;
  EXPECT_EQ(ExchangeChoices(r),
            (std::vector<ExchangeChoice>{{Dispatcher::kAllToAll, false}, {Dispatcher::kDeepEp, false}}));
  EXPECT_TRUE(ExchangeChoices(r, {}, {true}).empty());
  // In a 72-GPU NVLink domain the flex dispatcher is HybridEP.
  PlanRequest nvl72 = testing::SeedRequest("kimi-k3-debug", "gb200", 1);
  ASSERT_GT(nvl72.gpu.nvlink_gpus(), nvl72.gpus_per_node);
  EXPECT_EQ(ExchangeChoices(nvl72, {}, {false}),
            (std::vector<ExchangeChoice>{{Dispatcher::kAllToAll, false}, {Dispatcher::kHybridEp, false}}));
  PlanRequest dense = Small("gpt", 8, 1);
  EXPECT_EQ(ExchangeChoices(dense), (std::vector<ExchangeChoice>{{Dispatcher::kAllToAll, false}}));
}

// Every candidate is what EvaluatePlan says of its request, and passes CheckPlan.
TEST(SpaceSearchTest, CandidatesAreTheirRequestsEvaluations) {
  PlanRequest r = Small("kimi-k3-debug", 8, 2);
  const ParamCount pc = CountParams(r.model);
  SpaceSearchResult s = SearchSpace(r, pc);
  ASSERT_FALSE(s.top.empty());
  for (const SpaceCandidate& c : s.top) {
    const PlanRequest q = ApplyKnobs(r, c.knobs, c.evaluation.plan, c.evaluation.layer_split);
    EXPECT_TRUE(CheckPlan(q, c.evaluation.plan).empty());
    Result<PlanEvaluation> e = EvaluatePlan(q, c.evaluation.plan, pc);
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->step.total, c.step_time());
    EXPECT_EQ(e->memory.actor.total(), c.evaluation.memory.actor.total());
    EXPECT_TRUE(e->feasible());
  }
}

// The search varies what the layout-only search fixes: its best is at least
// as fast as the best under the request's own settings.
TEST(SpaceSearchTest, BeatsOrMatchesTheFixedSettingsSearch) {
  PlanRequest r = Small("kimi-k3-debug", 8, 1);
  const ParamCount pc = CountParams(r.model);
  SpaceSearchResult s = SearchSpace(r, pc);
  ASSERT_FALSE(s.top.empty());
  PlanRequest fixed = r;
  fixed.layer_split = {LayerSplitKind::kAuto, {}};
  SearchResult old = SearchPlans(fixed, pc);
  ASSERT_FALSE(old.best.empty());
  EXPECT_LE(s.top.front().step_time(), old.best.front().step.total);
}

TEST(SpaceSearchTest, CountsAddUpAndPruningBites) {
  PlanRequest r = testing::SeedRequest("kimi-k2.6", "h200", 64);
  r.top = 5;
  SpaceSearchResult s = SearchSpace(r, CountParams(r.model));
  const SpaceCounts& c = s.counts;
  EXPECT_EQ(c.considered, c.pruned_constraints + c.pruned_memory + c.pruned_time + c.evaluated);
  EXPECT_GT(c.pruned_memory, 0);
  EXPECT_GT(c.pruned_time, 0);
  EXPECT_LT(c.evaluated, c.considered / 2);
}

// Every pool some fitting engine tiles, each with ChooseRollout's engine:
// on 8 H100s kimi-k3-debug fits an engine of one GPU, so every pool from 1
// to 7; with GPUs too small for one, an engine of two (tp 2) or more
// tiles only the even pools.
TEST(SpaceSearchTest, RolloutPoolsAreEveryPoolAnEngineTiles) {
  PlanRequest r = Small("kimi-k3-debug", 8, 1);
  const ParamCount pc = CountParams(r.model);
  auto fits_on = [&](PlanRequest q, int pool) {
    q.placement = Placement::kSplit;
    q.rollout_gpus = pool;
    return ChooseRollout(q, pc);
  };
  for (double gb : {0.0, 2.4, 1.0}) {
    SCOPED_TRACE(gb);
    PlanRequest q = Small("kimi-k3-debug", 8, 2, gb);
    std::vector<int> expected;
    for (int pool = 1; pool < 16; ++pool)
      if (fits_on(q, pool)) expected.push_back(pool);
    EXPECT_EQ(RolloutPoolSizes(q, pc), expected);
  }
  EXPECT_EQ(RolloutPoolSizes(r, pc), (std::vector<int>{1, 2, 3, 4, 5, 6, 7}));
  r.gpus_per_node = 1;
  EXPECT_EQ(RolloutPoolSizes(r, pc), std::vector<int>{});
}

}  // namespace
}  // namespace kp
