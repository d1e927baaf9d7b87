// What `kimi-plan report` says about runs without a reference: the list of
// runs, one run's summary, and the planner's and simulator's predictions
// next to what a run measured when its configuration names a plan.
//
// Thread-safety: pure functions over values read from the store.
#ifndef KIMI_PLAN_REPORT_SUMMARY_H_
#define KIMI_PLAN_REPORT_SUMMARY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/run_data.h"
#include "store/store.h"

namespace kp {

/// One line of the run list.
struct RunListEntry {
  std::int64_t id = 0;
  std::string kind, model, created_at;
  int steps = 0;
  std::optional<int> planned_steps;  ///< config_json's "steps", when it has one
  std::string status;                ///< RunState
  std::string error;                 ///< a failed run's error
  std::optional<double> last_loss;  ///< the last step's loss; nullopt with no steps
  std::int64_t plan_id = 0;
};

RunListEntry ListEntry(const RunData& run);
/// "5", or "5 of 200" when the configuration says how many were planned.
std::string StepsOf(const RunListEntry& e);
/// The status for people: "failed: <error>", "ended without a word: ...".
std::string StatusLine(const RunListEntry& e);

/// Mean, median and extremes of one metric over a run.
struct MetricStats {
  std::optional<double> first, last;
  std::optional<double> first_tenth_mean;  ///< mean over the first ceil(n / 10) logged values
  std::optional<double> last_tenth_mean;   ///< mean over the last ceil(n / 10)
  std::optional<double> median, max;
};

MetricStats Stats(const std::vector<std::pair<int, double>>& series);

/// One predicted-against-measured comparison.
struct PredictionRow {
  std::string what;          ///< "actor step time s", "actor memory per GPU bytes", "loop step s (simulation 4)"
  std::string source;        ///< "plan 3" or "simulation 4 (loop)"
  double predicted = 0;
  std::optional<double> measured;  ///< nullopt when the run has no such measurement
};

/// The plan a run names, as the report needs it.
struct PlanPredictions {
  std::int64_t plan_id = 0;
  std::optional<double> step_time_s;         ///< plans.step_time_s when the plan is feasible or found one
  std::optional<double> actor_total_bytes;   ///< result_json memory.actor.total_bytes
  /// Each simulation recorded against the plan with the step time it
  /// predicts: loop step_time_s, pipeline makespan_us / 1e6.
  std::vector<std::pair<SimulationRecord, double>> simulations;
};

/// What the plan and the simulations recorded against it (plan_id) predict.
PlanPredictions PredictionsOf(const PlanRecord& plan, const std::vector<SimulationRecord>& simulations);

/// The rows for a run: predicted step time against the run's median step
/// time, predicted actor memory against the run's peak, each simulation's
/// step against the median step time.
std::vector<PredictionRow> PredictedVsMeasured(const PlanPredictions& p, const RunData& run);

struct RunSummary {
  RunListEntry entry;
  std::string config_json;
  int first_step = 0, last_step = 0;
  MetricStats loss, grad_norm, tokens_per_s, step_time_s, peak_memory_bytes;
  std::optional<MetricStats> reward;  ///< when the run logs a reward
  std::vector<PredictionRow> predictions;  ///< empty unless the config names a plan
};

RunSummary Summarise(const RunData& run, const std::optional<PlanPredictions>& plan);

/// Text views.
std::string RenderRunList(const std::vector<RunListEntry>& runs, const std::vector<TableCount>& tables);
std::string RenderSummary(const RunSummary& s);
std::string RenderPredictions(const std::vector<std::pair<std::int64_t, std::vector<PredictionRow>>>& by_run);

/// JSON and CSV of the views (docs/report.md).
nlohmann::json RunListJson(const std::vector<RunListEntry>& runs, const std::vector<TableCount>& tables);
nlohmann::json SummaryJson(const RunSummary& s);
nlohmann::json PredictionsJson(const std::vector<PredictionRow>& rows);
/// run_id,kind,model,created_at,steps,last_loss,plan_id
std::string RunListCsv(const std::vector<RunListEntry>& runs);
/// step, then every metric column of the run, values exact (%.17g), NULL empty.
std::string StepsCsv(const RunData& run);

}  // namespace kp

#endif  // KIMI_PLAN_REPORT_SUMMARY_H_
