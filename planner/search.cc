#include "planner/search.h"

#include <algorithm>
#include <cmath>

#include "common/clock.h"
#include "planner/constraints.h"
#include "planner/schedule_model.h"

namespace kp {

namespace {

std::vector<int> Divisors(int n, int limit) {
  std::vector<int> out;
  for (int d = 1; d <= std::min(n, limit); ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

std::vector<int> VpChoices(const PlanRequest& req) {
  if (!ScheduleTakesVp(req.schedule)) return {1};
  return {2, 3, 4, 5, 6, 8};
}

}  // namespace

namespace {

// The engines of at most `max_gpus` GPUs, fewest GPUs first, then more tp.
std::vector<ParallelPlan> RolloutCandidates(const PlanRequest& req, std::int64_t max_gpus) {
  const ModelSpec& m = req.model;
  std::vector<ParallelPlan> options;
  for (int tp : Divisors(req.gpus_per_node, req.gpus_per_node)) {
    if (m.heads % tp != 0) continue;
    for (std::int64_t dp = 1; tp * dp <= max_gpus; dp *= 2) {
      ParallelPlan p;
      p.rollout_tp = tp;
      p.rollout_dp = static_cast<int>(dp);
      p.rollout_ep = m.is_moe() ? static_cast<int>(tp * dp) : 1;
      if (m.is_moe() && m.moe.num_experts % p.rollout_ep != 0) continue;
      if (!m.is_moe() && dp > 1) continue;
      options.push_back(p);
    }
  }
  std::sort(options.begin(), options.end(), [](const ParallelPlan& a, const ParallelPlan& b) {
    if (a.rollout_gpus_per_engine() != b.rollout_gpus_per_engine())
      return a.rollout_gpus_per_engine() < b.rollout_gpus_per_engine();
    return a.rollout_tp > b.rollout_tp;
  });
  return options;
}

bool RolloutFits(const PlanRequest& req, const ParamCount& pc, const ParallelPlan& r) {
  // The rollout's memory does not depend on the actor's layout: check it
  // with a trivial actor split.
  MemoryReport mem = EstimateMemory(req, r, StageSplit{{StageLayers{0, req.model.layers, true, true}}}, pc);
  const Bytes need = mem.rollout.weights + mem.rollout.activations + GB(2.0) + mem.rollout_kv_per_sequence;
  return need <= mem.rollout.capacity;
}

}  // namespace

std::optional<ParallelPlan> ChooseRollout(const PlanRequest& req, const ParamCount& pc) {
  const std::int64_t pool = req.rollout_pool_gpus();
  for (const ParallelPlan& r : RolloutCandidates(req, pool))
    if (pool % r.rollout_gpus_per_engine() == 0 && RolloutFits(req, pc, r)) return r;
  return std::nullopt;
}

std::vector<ParallelPlan> FittingRollouts(const PlanRequest& req, const ParamCount& pc, std::int64_t max_gpus) {
  std::vector<ParallelPlan> out;
  for (const ParallelPlan& r : RolloutCandidates(req, max_gpus))
    if (RolloutFits(req, pc, r)) out.push_back(r);
  return out;
}

std::vector<ParallelPlan> EnumeratePlans(const PlanRequest& req) {
  const ModelSpec& m = req.model;
  const int gpus = req.actor_gpus();
  std::vector<ParallelPlan> out;
  const std::vector<int> cps = {1, 2, 4, 8, 16};
  for (int tp : Divisors(req.gpus_per_node, req.gpus_per_node)) {
    if (m.heads % tp != 0) continue;
    for (int cp : cps) {
      if (gpus % (tp * cp) != 0 || (cp > 1 && req.seq_length() % (2 * cp) != 0)) continue;
      for (int pp : Divisors(gpus / (tp * cp), m.layers + 2)) {
        const int dp = gpus / (tp * cp * pp);
        for (int vp : pp == 1 ? std::vector<int>{1} : VpChoices(req)) {
          const std::vector<int> eps = m.is_moe() ? Divisors(m.moe.num_experts, tp * dp * cp) : std::vector<int>{1};
          for (int ep : eps) {
            for (int etp : m.is_moe() ? Divisors(tp, tp) : std::vector<int>{1}) {
              ParallelPlan p;
              p.tp = tp; p.cp = cp; p.pp = pp; p.dp = dp; p.vp = vp; p.ep = ep; p.etp = etp;
              p.rollout_tp = req.plan.rollout_tp;
              p.rollout_ep = req.plan.rollout_ep;
              p.rollout_dp = req.plan.rollout_dp;
              if (CheckPlan(req, p).empty()) out.push_back(p);
            }
          }
        }
      }
    }
  }
  return out;
}

SearchResult SearchPlans(const PlanRequest& req, const ParamCount& pc, StageCostCache* cache) {
  Stopwatch watch;
  SearchResult result;
  PlanRequest r = req;
  if (std::optional<ParallelPlan> roll = ChooseRollout(req, pc)) {
    r.plan.rollout_tp = roll->rollout_tp;
    r.plan.rollout_ep = roll->rollout_ep;
    r.plan.rollout_dp = roll->rollout_dp;
  }
  std::vector<PlanEvaluation> feasible;
  for (const ParallelPlan& p : EnumeratePlans(r)) {
    Result<PlanEvaluation> e = EvaluatePlan(r, p, pc, cache);
    if (!e.ok()) continue;
    ++result.evaluated;
    if (e->feasible()) feasible.push_back(std::move(e).value());
  }
  result.feasible = static_cast<long long>(feasible.size());
  std::stable_sort(feasible.begin(), feasible.end(), [](const PlanEvaluation& a, const PlanEvaluation& b) {
    return a.step.tokens_per_s_per_gpu > b.step.tokens_per_s_per_gpu;
  });
  if (static_cast<int>(feasible.size()) > req.top) feasible.resize(req.top);
  result.best = std::move(feasible);
  result.seconds = watch.Seconds();
  return result;
}

std::optional<NearestFit> FindNearestFit(const PlanRequest& req, const ParamCount& pc) {
  struct Variant {
    std::string changes;
    PlanRequest request;
  };
  std::vector<Variant> variants = {{"", req}};
  if (req.recompute != Recompute::kFull) {
    Variant v{"--recompute full", req};
    v.request.recompute = Recompute::kFull;
    variants.push_back(v);
  }
  if (req.mode == TrainMode::kLora && !req.lora.native_base) {
    Variant v{variants.back().changes + (variants.back().changes.empty() ? "" : " ") + "--lora-native-base",
              variants.back().request};
    v.request.lora.native_base = true;
    variants.push_back(v);
  }
  const double factors[] = {1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8};
  // Layer prices do not depend on the cluster's size: one cache per variant.
  std::vector<StageCostCache> caches(variants.size());
  int last = 0;
  for (double f : factors) {
    const int nodes = static_cast<int>(std::ceil(req.nodes * f));
    if (nodes == last) continue;
    last = nodes;
    for (size_t i = 0; i < variants.size(); ++i) {
      const Variant& v = variants[i];
      PlanRequest r = v.request;
      r.nodes = nodes;
      r.top = 1;
      SearchResult s = SearchPlans(r, pc, &caches[i]);
      if (!s.best.empty()) return NearestFit{nodes, v.changes, s.best.front()};
    }
  }
  return std::nullopt;
}

}  // namespace kp
