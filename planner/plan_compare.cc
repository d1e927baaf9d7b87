#include "planner/plan_compare.h"

#include <algorithm>
#include <cmath>

#include "planner/space_search.h"

namespace kp {

namespace {

using nlohmann::json;

std::string Sizes(const ParallelPlan& p) {
  return "tp " + std::to_string(p.tp) + " pp " + std::to_string(p.pp) + " vp " + std::to_string(p.vp) + " ep " +
         std::to_string(p.ep) + " etp " + std::to_string(p.etp) + " cp " + std::to_string(p.cp) + " dp " +
         std::to_string(p.dp);
}

std::string RolloutOf(const ParallelPlan& p) {
  return "tp " + std::to_string(p.rollout_tp) + " ep " + std::to_string(p.rollout_ep) + " dp " +
         std::to_string(p.rollout_dp);
}

std::string PlacementOf(const PlanRequest& r) {
  if (r.placement == Placement::kColocated) return "colocated";
  return "split, rollout on " + std::to_string(r.rollout_gpus) + " GPUs";
}

// "even: 16 stages of 3 to 5 layers": the whole split is in the plan's JSON.
std::string SplitSummary(const PlanEvaluation& e) {
  const std::vector<int> counts = LayerCounts(e.split);
  const auto [low, high] = std::minmax_element(counts.begin(), counts.end());
  std::string out = e.layer_split.ToString() + ": " + std::to_string(counts.size()) + " stage" +
                    (counts.size() == 1 ? "" : "s");
  if (counts.empty()) return out;
  out += " of " + std::to_string(*low) + (*low == *high ? "" : " to " + std::to_string(*high)) + " layers";
  return out;
}

bool Differ(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    return std::abs(x - y) > 1e-9 * std::max(std::abs(x), std::abs(y));
  }
  return a != b;
}

const char* UnitName(TermUnit u) {
  switch (u) {
    case TermUnit::kSetting: return "setting";
    case TermUnit::kSeconds: return "s";
    case TermUnit::kBytes: return "bytes";
    case TermUnit::kTokensPerSecond: return "tokens/s/GPU";
  }
  return "";
}

}  // namespace

std::vector<PlanTerm> CompareTerms(const PlanRequest& ar, const PlanEvaluation& a, const PlanRequest& br,
                                   const PlanEvaluation& b) {
  std::vector<PlanTerm> out;
  auto add = [&](std::string name, TermUnit unit, json x, json y) {
    PlanTerm t{std::move(name), unit, std::move(x), std::move(y), false};
    t.differs = Differ(t.a, t.b);
    out.push_back(std::move(t));
  };
  const TermUnit set = TermUnit::kSetting, sec = TermUnit::kSeconds, byt = TermUnit::kBytes;
  add("cluster GPUs", set, ar.world(), br.world());
  add("actor GPUs", set, ar.actor_gpus(), br.actor_gpus());
  add("layout", set, Sizes(a.plan), Sizes(b.plan));
  add("schedule", set, ScheduleName(ar.schedule), ScheduleName(br.schedule));
  add("micro-batch", set, ar.micro_batch, br.micro_batch);
  add("micro-batches per DP rank", set, a.step.microbatches, b.step.microbatches);
  add("recompute", set, RecomputeLabel(ar), RecomputeLabel(br));
  add("layer split", set, SplitSummary(a), SplitSummary(b));
  add("placement", set, PlacementOf(ar), PlacementOf(br));
  add("rollout", set, RolloutOf(a.plan), RolloutOf(b.plan));
  const RoleMemory &ma = a.memory.actor, &mb = b.memory.actor;
  add("memory: weights", byt, ma.weights.value(), mb.weights.value());
  add("memory: grads", byt, ma.grads.value(), mb.grads.value());
  add("memory: optimizer", byt, ma.optimizer.value(), mb.optimizer.value());
  add("memory: activations", byt, ma.activations.value(), mb.activations.value());
  add("memory: other", byt, ma.other.value(), mb.other.value());
  add("memory: actor total", byt, ma.total().value(), mb.total().value());
  add("memory: headroom", byt, MemoryHeadroom(ar, a.memory).value(), MemoryHeadroom(br, b.memory).value());
  const StepTime &sa = a.step, &sb = b.step;
  add("step: compute", sec, sa.compute.value(), sb.compute.value());
  add("step: bubble", sec, sa.bubble.value(), sb.bubble.value());
  add("step: tp comm", sec, sa.tp_comm.value(), sb.tp_comm.value());
  add("step: ep comm", sec, sa.ep_comm.value(), sb.ep_comm.value());
  add("step: cp comm", sec, sa.cp_comm.value(), sb.cp_comm.value());
  add("step: pp comm", sec, sa.pp_comm.value(), sb.pp_comm.value());
  add("step: dp comm", sec, sa.dp_comm.value(), sb.dp_comm.value());
  add("step: optimizer", sec, sa.optimizer.value(), sb.optimizer.value());
  add("step: total", sec, sa.total.value(), sb.total.value());
  add("tokens/s per GPU", TermUnit::kTokensPerSecond, sa.tokens_per_s_per_gpu, sb.tokens_per_s_per_gpu);
  add("feasible", set, a.feasible() ? "yes" : "no", b.feasible() ? "yes" : "no");
  return out;
}

json TermsToJson(const std::vector<PlanTerm>& terms, const std::string& a_name, const std::string& b_name) {
  json out = json::array();
  for (const PlanTerm& t : terms)
    out.push_back({{"term", t.name}, {"unit", UnitName(t.unit)}, {a_name, t.a}, {b_name, t.b}, {"differs", t.differs}});
  return out;
}

}  // namespace kp
