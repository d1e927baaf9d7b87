#include "planner/space_search.h"

#include <gtest/gtest.h>

#include <algorithm>
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
// and priced, every feasible plan kept) on every cluster of up to 64 GPUs:
// the same best plans in the same order, and the same two fronts, plan for
// plan.
TEST(SpaceSearchTest, PrunedEqualsBruteForceUpTo64Gpus) {
  struct Cluster {
    std::string model;
    int gpus_per_node, nodes;
    double memory_gb = 0;  ///< 0: the H100's 80 GB
  };
  std::vector<Cluster> clusters;
  for (int g : {1, 2, 4}) clusters.push_back({"kimi-k3-debug", g, 1});
  for (int n = 1; n <= 8; ++n) clusters.push_back({"kimi-k3-debug", 8, n});
  for (int n : {1, 2, 4, 8}) clusters.push_back({"gpt", 8, n});
  // GPUs too small for the unsharded states and for a colocated rollout
  // engine: the memory floor and the placement check prune here.
  for (int n : {1, 2, 4, 8}) clusters.push_back({"kimi-k3-debug", 8, n, 2.4});
  for (int n : {1, 2, 8}) clusters.push_back({"gpt", 8, n, 3.5});
  SpaceCounts pruning;
  for (const Cluster& c : clusters) {
    SCOPED_TRACE(c.model + " " + std::to_string(c.nodes) + " x " + std::to_string(c.gpus_per_node) + " GPUs of " +
                 std::to_string(c.memory_gb) + " GB");
    PlanRequest r = Small(c.model, c.gpus_per_node, c.nodes, c.memory_gb);
    const ParamCount pc = CountParams(r.model);
    SpaceSearchResult pruned = SearchSpace(r, pc);
    pruning.pruned_memory += pruned.counts.pruned_memory;
    pruning.pruned_time += pruned.counts.pruned_time;
    std::vector<Seen> seen;
    SpaceOptions brute_force;
    brute_force.prune = false;
    brute_force.each_feasible = [&](const SpaceCandidate& x) {
      seen.push_back({x.step_time().value(), x.headroom.value(), x.actor_gpus});
    };
    SpaceSearchResult brute = SearchSpace(r, pc, brute_force);

    EXPECT_EQ(pruned.counts.considered, brute.counts.considered);
    EXPECT_EQ(pruned.counts.considered, pruned.counts.pruned_constraints + pruned.counts.pruned_memory +
                                            pruned.counts.pruned_time + pruned.counts.evaluated);
    EXPECT_EQ(static_cast<long long>(seen.size()), brute.counts.feasible);
    ASSERT_FALSE(seen.empty());
    ASSERT_EQ(pruned.top.size(), std::min<size_t>(5, seen.size()));
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
  }
  // Both floors pruned somewhere, so the comparison above covers them.
  EXPECT_GT(pruning.pruned_memory, 0);
  EXPECT_GT(pruning.pruned_time, 0);
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

// Powers of two below the cluster and its eighths.
TEST(SpaceSearchTest, RolloutPools) {
  EXPECT_EQ(RolloutPoolSizes(8), (std::vector<int>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(RolloutPoolSizes(1), std::vector<int>{});
  EXPECT_EQ(RolloutPoolSizes(64), (std::vector<int>{1, 2, 4, 8, 16, 24, 32, 40, 48, 56}));
}

}  // namespace
}  // namespace kp
