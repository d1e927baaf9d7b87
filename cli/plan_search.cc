#include "cli/plan_search.h"

#include <cmath>
#include <sstream>

#include "cli/log.h"
#include "common/clock.h"
#include "common/table.h"
#include "planner/constraints.h"
#include "planner/plan_compare.h"
#include "planner/plan_json.h"

namespace kp {

namespace {

using nlohmann::json;

std::string ScheduleLabel(const SpaceCandidate& c) {
  std::string s = ScheduleName(c.knobs.schedule);
  if (c.evaluation.plan.vp > 1) s += " vp " + std::to_string(c.evaluation.plan.vp);
  return s;
}

std::string PlacementLabel(const PlanKnobs& k) {
  return k.placement == Placement::kColocated ? "colocated" : "split " + std::to_string(k.rollout_gpus);
}

std::string KnobsRecompute(const PlanKnobs& k) {
  return RecomputeLabel(k.recompute, k.recompute_method, k.recompute_layers);
}

std::string Gb(Bytes b) { return FormatFixed(b.value() / 1e9, 1); }

// The MoE exchange: the dispatcher, "+overlap" when overlapped; "-" for a
// dense model, which has none.
std::string ExchangeLabel(const PlanKnobs& k, bool moe) {
  if (!moe) return "-";
  return std::string(DispatcherName(k.dispatcher)) + (k.a2a_overlap ? "+overlap" : "");
}

std::string CandidateTable(const std::vector<SpaceCandidate>& list, bool moe) {
  Table t({"#", "placement", "schedule", "tp", "pp", "ep", "etp", "cp", "dp", "mb", "recompute", "exchange", "split",
           "actor GPUs", "actor GB", "headroom GB", "step s", "tokens/s/GPU", "MFU"});
  int i = 0;
  for (const SpaceCandidate& c : list) {
    const ParallelPlan& p = c.evaluation.plan;
    const StepTime& s = c.evaluation.step;
    t.AddRow({std::to_string(++i), PlacementLabel(c.knobs), ScheduleLabel(c), std::to_string(p.tp),
              std::to_string(p.pp), std::to_string(p.ep), std::to_string(p.etp), std::to_string(p.cp),
              std::to_string(p.dp), std::to_string(c.knobs.micro_batch), KnobsRecompute(c.knobs),
              ExchangeLabel(c.knobs, moe), c.evaluation.layer_split.ToString(), std::to_string(c.actor_gpus),
              Gb(c.evaluation.memory.actor.total()), Gb(c.headroom), FormatFixed(s.total.value(), 2),
              FormatFixed(s.tokens_per_s_per_gpu, 0), FormatFixed(100 * s.mfu, 1) + "%"});
  }
  return t.Render();
}

std::string CountsLine(const SpaceSearchResult& s) {
  const SpaceCounts& c = s.counts;
  std::ostringstream o;
  o << "search    " << c.considered << " candidates considered: " << c.pruned_constraints << " broke a rule, "
    << c.pruned_memory << " pruned by the memory floor, " << c.pruned_time << " by the step-time floor; "
    << c.evaluated << " priced, " << c.feasible << " feasible, in " << FormatFixed(s.seconds, 3) << " s\n";
  return o.str();
}

json CandidateJson(const PlanRequest& req, const ParamCount& pc, const SpaceCandidate& c) {
  const PlanRequest r = ApplyKnobs(req, c.knobs, c.evaluation.plan, c.evaluation.layer_split);
  json j = EvaluationToJson(r, pc, c.evaluation);
  j["settings"] = {{"micro_batch", c.knobs.micro_batch}, {"recompute", RecomputeName(c.knobs.recompute)},
                   {"recompute_method", RecomputeMethodJson(r)}, {"recompute_num_layers", RecomputeLayersJson(r)},
                   {"schedule", ScheduleName(c.knobs.schedule)}, {"vp", c.evaluation.plan.vp},
                   {"placement", c.knobs.placement == Placement::kColocated ? "colocated" : "split"},
                   {"rollout_gpus", c.knobs.rollout_gpus}, {"layer_split", c.evaluation.layer_split.ToString()},
                   {"dispatcher", DispatcherName(c.knobs.dispatcher)}, {"a2a_overlap", c.knobs.a2a_overlap}};
  j["actor_gpus"] = c.actor_gpus;
  j["headroom_bytes"] = c.headroom.value();
  return j;
}

json ListJson(const PlanRequest& req, const ParamCount& pc, const std::vector<SpaceCandidate>& list) {
  json out = json::array();
  for (const SpaceCandidate& c : list) out.push_back(CandidateJson(req, pc, c));
  return out;
}

std::string TermValue(const PlanTerm& t, const json& v) {
  switch (t.unit) {
    case TermUnit::kSetting: return v.is_string() ? v.get<std::string>() : v.dump();
    case TermUnit::kSeconds: return FormatFixed(v.get<double>(), 3) + " s";
    case TermUnit::kBytes: return FormatGB(v.get<double>());
    case TermUnit::kTokensPerSecond: return FormatFixed(v.get<double>(), 0);
  }
  return "";
}

std::string TermsTable(const std::string& preset, const std::vector<PlanTerm>& terms) {
  Table t({"term", "preset " + preset, "best", "change"});
  for (const PlanTerm& term : terms) {
    if (!term.differs) continue;
    std::string change;
    if (term.unit != TermUnit::kSetting) {
      const double d = term.b.get<double>() - term.a.get<double>();
      change = (d > 0 ? "+" : "") + TermValue(term, d);
    }
    t.AddRow({term.name, TermValue(term, term.a), TermValue(term, term.b), change});
  }
  return t.Render();
}

// The preset's own plan beside the best: every term, and the readable
// table of those that differ. Empty when the preset's plan is not a valid
// layout on this request.
void VersusPreset(const PlanRequest& req, const ParamCount& pc, const std::string& preset,
                  const PlanRequest& best_req, const PlanEvaluation& best, PlanSearchOutput& out) {
  Result<PlanEvaluation> own = PlanFixed(req, pc);
  if (!own.ok()) {
    out.json["versus_preset"] = {{"preset", preset}, {"error", own.status().message()}};
    out.versus_preset = "versus    preset " + preset + ": its own plan is not valid here (" + own.status().message() + ")\n";
    return;
  }
  const std::vector<PlanTerm> terms = CompareTerms(req, *own, best_req, best);
  const double speedup = own->step.total.value() / best.step.total.value();
  out.json["versus_preset"] = {{"preset", preset}, {"preset_plan", EvaluationToJson(req, pc, *own)},
                               {"speedup", speedup}, {"terms", TermsToJson(terms, "preset", "best")}};
  std::ostringstream o;
  o << "\nwhy this beats the preset " << preset << ": ";
  if (own->feasible())
    o << FormatFixed(own->step.total.value(), 2) << " s -> " << FormatFixed(best.step.total.value(), 2)
      << " s per step (" << FormatFixed(speedup, 2) << "x faster)";
  else
    o << "the preset's own plan does not fit (" << own->violations.front() << "); the best plan fits, at "
      << FormatFixed(best.step.total.value(), 2) << " s per step (the preset's would take "
      << FormatFixed(own->step.total.value(), 2) << " s)";
  o << ". The terms that differ:\n" << TermsTable(preset, terms);
  out.versus_preset = o.str();
}

json SpaceJson(const PlanRequest& req, const ParamCount& pc, const SpaceSearchResult& s) {
  const SpaceCounts& c = s.counts;
  return {{"considered", c.considered},
          {"pruned", {{"constraints", c.pruned_constraints}, {"memory_floor", c.pruned_memory},
                      {"time_floor", c.pruned_time}}},
          {"evaluated", c.evaluated}, {"feasible", c.feasible}, {"seconds", s.seconds},
          {"top", ListJson(req, pc, s.top)}, {"front_gpus", ListJson(req, pc, s.front_gpus)},
          {"front_headroom", ListJson(req, pc, s.front_headroom)}};
}

std::string Tables(const SpaceSearchResult& s, bool moe) {
  return "top " + std::to_string(s.top.size()) + " (fastest first)\n" + CandidateTable(s.top, moe) +
         "Pareto front: step time against actor GPUs\n" + CandidateTable(s.front_gpus, moe) +
         "Pareto front: step time against memory headroom\n" + CandidateTable(s.front_headroom, moe);
}

SpaceOptions OptionsFor(const po::variables_map& vm, const CliEnv& env, const PlanRequest& req) {
  SpaceOptions o;
  if (vm.count("layer-split") || vm.count("engine")) o.splits = SplitCandidates(req.layer_split);
  if (vm.count("engine") && vm["engine"].as<std::string>() == "verl")
    o.schedules = {ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B};
  // A dispatcher or overlap the user gave is held; the rest are searched.
  if (vm.count("dispatcher")) o.dispatchers = {req.recipe.dispatcher};
  if (vm.count("a2a-overlap")) o.a2a_overlaps = {req.recipe.a2a_overlap};
  auto watch = std::make_shared<Stopwatch>();
  auto next = std::make_shared<double>(1.0);
  o.progress = [&env, watch, next](double share) {
    if (watch->Seconds() < *next || share >= 1.0) return;
    *next = watch->Seconds() + 1.0;
    Progress(env, "search: " + FormatFixed(100 * share, 0) + "% of the space visited");
  };
  return o;
}

// The method flags of a full recompute other than plain uniform 1.
std::string RecomputeFlags(const PlanKnobs& k) {
  if (k.recompute != Recompute::kFull || (k.recompute_method == RecomputeMethod::kUniform && k.recompute_layers == 1))
    return "";
  return std::string(" --recompute-method ") + RecomputeMethodName(k.recompute_method) + " --recompute-num-layers " +
         std::to_string(k.recompute_layers);
}

// The settings a plan needs beyond its sizes, as the flags that set them.
std::string SettingsFlags(const SpaceCandidate& c, bool moe) {
  std::string out = std::string("--schedule ") + ScheduleName(c.knobs.schedule) +
                    " --micro-batch " + std::to_string(c.knobs.micro_batch) + " --recompute " +
                    RecomputeName(c.knobs.recompute) + RecomputeFlags(c.knobs) + " --layer-split " + c.evaluation.layer_split.ToString() +
                    " --placement " + (c.knobs.placement == Placement::kColocated ? "colocated" : "split");
  if (c.knobs.placement == Placement::kSplit) out += " --rollout-gpus " + std::to_string(c.knobs.rollout_gpus);
  if (moe)
    out += std::string(" --dispatcher ") + DispatcherName(c.knobs.dispatcher) + " --a2a-overlap " +
           (c.knobs.a2a_overlap ? "on" : "off");
  return out;
}

// The whole space on 1.25x to 8x the nodes, fewest first: the first
// cluster where a plan fits, with its best plan's request.
std::optional<std::pair<PlanRequest, SpaceSearchResult>> NearestSpace(const PlanRequest& req, const ParamCount& pc,
                                                                        const SpaceOptions& options) {
  const double factors[] = {1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8};
  int last = req.nodes;
  for (double f : factors) {
    PlanRequest r = req;
    r.nodes = static_cast<int>(std::ceil(req.nodes * f));
    if (r.nodes == last) continue;
    last = r.nodes;
    SpaceSearchResult s = SearchSpace(r, pc, options);
    if (!s.top.empty()) return std::make_pair(r, std::move(s));
  }
  return std::nullopt;
}

}  // namespace

Result<PlanSearchOutput> SearchForPlan(const po::variables_map& vm, const CliEnv& env, const PlanRequest& req,
                                       const ParamCount& pc, const std::string& preset) {
  PlanSearchOutput out;
  const bool moe = req.model.is_moe();
  const SpaceOptions options = OptionsFor(vm, env, req);
  out.search = SearchSpace(req, pc, options);
  const SpaceSearchResult& s = out.search;
  out.json = SpaceJson(req, pc, s);
  std::ostringstream head;
  head << CountsLine(s);
  if (!s.top.empty()) {
    head << Tables(s, moe) << "\n";
    const SpaceCandidate& best = s.top.front();
    out.best_request = ApplyKnobs(req, best.knobs, best.evaluation.plan, best.evaluation.layer_split);
    if (!preset.empty()) VersusPreset(req, pc, preset, *out.best_request, best.evaluation, out);
  } else if (auto near = NearestSpace(req, pc, options)) {
    const auto& [bigger, found] = *near;
    const SpaceCandidate& best = found.top.front();
    out.nearest = NearestFit{bigger.nodes, SettingsFlags(best, moe), best.evaluation};
    out.json["nearest"] = SpaceJson(bigger, pc, found);
    out.json["nearest"]["nodes"] = bigger.nodes;
    head << "nothing fits on " << req.world() << " GPUs; the whole space on " << bigger.nodes << " nodes ("
         << bigger.world() << " GPUs), the fewest more where a plan fits:\n"
         << CountsLine(found) << Tables(found, moe) << "\n";
    if (!preset.empty())
      VersusPreset(req, pc, preset,
                   ApplyKnobs(bigger, best.knobs, best.evaluation.plan, best.evaluation.layer_split), best.evaluation,
                   out);
  }
  out.head = head.str();
  return out;
}

}  // namespace kp
