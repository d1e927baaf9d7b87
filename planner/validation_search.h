// Whether the search earns its keep on published runs: for a validation
// case, every actor layout of its cluster (tp, cp, pp, vp, ep, etp under
// 1f1b and interleaved-1f1b, as EnumeratePlans gives them, plus the
// published one) under every token dispatcher (alltoall, deepep, hybridep)
// with the expert exchange overlapped or not, the case's model, batch,
// micro-batch, recompute, FP8 recipe and CUDA graphs held, priced, the ones
// whose actor fits ranked by predicted step time. The search earns its keep when the published layout is in the top
// N, or the top N holds one predicted faster that fits.
// Thread-safety: none needed; pure functions of their arguments.
#ifndef KIMI_PLAN_PLANNER_VALIDATION_SEARCH_H_
#define KIMI_PLAN_PLANNER_VALIDATION_SEARCH_H_

#include <string>

#include "common/status.h"
#include "planner/plan_request.h"
#include "planner/validation.h"

namespace kp {

struct SearchCheck {
  std::string id;
  int fitting = 0;         ///< layouts (with their dispatcher and overlap) priced whose actor fits
  int published_rank = 0;  ///< 1-based among them; 0 when the published layout does not fit
  double published_step_s = 0;
  ParallelPlan best;       ///< the fastest layout that fits
  ScheduleKind best_schedule = ScheduleKind::k1F1B;
  Dispatcher best_dispatcher = Dispatcher::kAllToAll;
  bool best_a2a_overlap = false;
  double best_step_s = 0;
  /// The published layout within the top `top`, or the fastest predicted
  /// faster than it (and fitting).
  bool EarnsKeep(int top) const {
    return (published_rank >= 1 && published_rank <= top) || (fitting > 0 && best_step_s < published_step_s);
  }
};

/// The check for one case. Errors: the published plan's (PlanFixed).
Result<SearchCheck> CheckSearch(const ValidationCase& c);

}  // namespace kp

#endif  // KIMI_PLAN_PLANNER_VALIDATION_SEARCH_H_
