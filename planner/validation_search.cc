#include "planner/validation_search.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "planner/planner.h"
#include "planner/search.h"
#include "planner/space_search.h"

namespace kp {

namespace {

struct Priced {
  double step_s;
  ParallelPlan plan;
  ScheduleKind schedule;
  Dispatcher dispatcher;
  bool a2a_overlap;
  bool published;
};

bool SameLayout(const ParallelPlan& a, const ParallelPlan& b) {
  return std::tie(a.tp, a.pp, a.vp, a.ep, a.etp, a.cp, a.dp) == std::tie(b.tp, b.pp, b.vp, b.ep, b.etp, b.cp, b.dp);
}

}  // namespace

Result<SearchCheck> CheckSearch(const ValidationCase& c) {
  const ParamCount pc = CountParams(c.request.model);
  KP_ASSIGN_OR_RETURN(const PlanEvaluation published, PlanFixed(c.request, pc));
  std::vector<Priced> fitting;
  const RecipeOptions& recipe = c.request.recipe;
  if (published.memory.actor.fits())
    fitting.push_back({published.step.total.value(), c.request.plan, c.request.schedule, recipe.dispatcher,
                       recipe.a2a_overlap, true});
  // Other layouts take the split that suits them best: the published
  // layout string names its own stage count.
  for (ScheduleKind schedule : {ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B}) {
    PlanRequest r = c.request;
    r.schedule = schedule;
    r.layer_split = LayerSplit{LayerSplitKind::kAuto, {}};
    for (const ExchangeChoice& x : ExchangeChoices(c.request)) {
      r.recipe.dispatcher = x.dispatcher;
      r.recipe.a2a_overlap = x.a2a_overlap;
      const bool published_recipe = x.dispatcher == recipe.dispatcher && x.a2a_overlap == recipe.a2a_overlap;
      // The layouts Megatron runs with this overlap (CheckPlan).
      for (const ParallelPlan& p : EnumeratePlans(r)) {
        if (published_recipe && SameLayout(p, c.request.plan) && schedule == c.request.schedule) continue;
        r.plan = p;
        Result<PlanEvaluation> e = PlanFixed(r, pc);
        if (e.ok() && e->memory.actor.fits())
          fitting.push_back({e->step.total.value(), p, schedule, x.dispatcher, x.a2a_overlap, false});
      }
    }
  }
  // Fastest first; ties keep the published layout ahead (it is no worse).
  std::stable_sort(fitting.begin(), fitting.end(), [](const Priced& a, const Priced& b) {
    if (a.step_s != b.step_s) return a.step_s < b.step_s;
    return a.published && !b.published;
  });
  SearchCheck s;
  s.id = c.id;
  s.fitting = static_cast<int>(fitting.size());
  s.published_step_s = published.step.total.value();
  for (size_t i = 0; i < fitting.size(); ++i)
    if (fitting[i].published) s.published_rank = static_cast<int>(i) + 1;
  if (!fitting.empty()) {
    s.best = fitting.front().plan;
    s.best_schedule = fitting.front().schedule;
    s.best_dispatcher = fitting.front().dispatcher;
    s.best_a2a_overlap = fitting.front().a2a_overlap;
    s.best_step_s = fitting.front().step_s;
  }
  return s;
}

}  // namespace kp
