// `kimi-plan plan --search`: the whole space searched (planner/space_search.h),
// its results as the readable tables and the JSON, and, for a preset, the
// preset's plan beside the best one term by term.
#ifndef KIMI_PLAN_CLI_PLAN_SEARCH_H_
#define KIMI_PLAN_CLI_PLAN_SEARCH_H_

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/options.h"
#include "planner/search.h"
#include "planner/space_search.h"

namespace kp {

struct PlanSearchOutput {
  SpaceSearchResult search;
  /// The best plan's request (its settings applied) and evaluation; unset
  /// when nothing fits.
  std::optional<PlanRequest> best_request;
  /// When nothing fits: the best plan of the whole space on the fewest more
  /// nodes (1.25x to 8x) where one does, its settings as flags in
  /// `changes`; unset when nothing fits up to 8x either.
  std::optional<NearestFit> nearest;
  /// The `search` JSON object: counts, top, both fronts, versus_preset.
  nlohmann::json json;
  /// The readable search summary, top list and fronts (printed before the
  /// best plan's details) and the comparison with the preset (after them).
  std::string head, versus_preset;
};

/// Searches req's space (and, when nothing fits, the same space on larger
/// clusters for `nearest`). The layer-split rule is searched unless
/// --layer-split or --engine fixed it; --engine verl keeps the schedules
/// Megatron-LM runs (1f1b, interleaved-1f1b). For an MoE model every
/// dispatcher, overlapped or not, is searched unless --dispatcher or
/// --a2a-overlap holds it. Progress goes to stderr when
/// the search takes over a second. `preset`: the topology's name, whose own
/// plan (req.plan with req's settings) is set beside the best, or beside
/// the nearest fit's best when the preset's cluster fits nothing.
Result<PlanSearchOutput> SearchForPlan(const po::variables_map& vm, const CliEnv& env, const PlanRequest& req,
                                       const ParamCount& pc, const std::string& preset);

}  // namespace kp

#endif  // KIMI_PLAN_CLI_PLAN_SEARCH_H_
