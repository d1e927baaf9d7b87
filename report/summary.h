// What `kimi-plan report` says about runs without a reference: the list of
// runs, one run's summary, and the planner's and simulator's predictions
// next to what a run measured when its configuration names a plan.
//
// Thread-safety: pure functions over values read from the store.
#ifndef KIMI_PLAN_REPORT_SUMMARY_H_
#define KIMI_PLAN_REPORT_SUMMARY_H_

#include <cstdint>
#include <map>
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
  /// measured / predicted; nullopt without a measurement or with a zero prediction.
  std::optional<double> Ratio() const;
};

/// The plan a run names, as the report needs it.
struct PlanPredictions {
  std::int64_t plan_id = 0;
  std::optional<double> step_time_s;         ///< plans.step_time_s when the plan is feasible or found one
  std::optional<double> actor_total_bytes;   ///< result_json memory.actor.total_bytes
  double actor_reserve_bytes = 0;            ///< of which the CUDA/NCCL reserve, which no allocator counts
  std::optional<double> mfu;                 ///< result_json mfu
  std::optional<double> tokens_per_step;     ///< result_json step.tokens_per_step
  int actor_gpus = 0;                        ///< result_json cluster.actor_gpus
  /// The loop simulations recorded against the plan: each phase's seconds
  /// (costs_s: rollout, train, sync, ...) and the loop's step.
  struct Loop {
    std::int64_t id = 0;
    double step_time_s = 0;
    std::map<std::string, double> costs_s;
  };
  std::vector<Loop> loops;
  /// Each simulation recorded against the plan with the step time it
  /// predicts: loop step_time_s, pipeline makespan_us / 1e6.
  std::vector<std::pair<SimulationRecord, double>> simulations;
};

/// What the plan and the simulations recorded against it (plan_id) predict.
PlanPredictions PredictionsOf(const PlanRecord& plan, const std::vector<SimulationRecord>& simulations);

/// The rows for a run: predicted step time against the run's median step
/// time, predicted actor memory against the run's peak, each simulation's
/// step against the median step time. For a Verl run (kind "verl") the
/// loop's phases instead, each against the median of Verl's timing
/// (VerlPredictions).
std::vector<PredictionRow> PredictedVsMeasured(const PlanPredictions& p, const RunData& run);
/// A Verl run against its plan: the loop step (timing_s/step), generation
/// (timing_s/gen), training (timing_s/update_actor, against the plan's
/// step time and each loop simulation's train phase) and weight sync
/// (timing_s/update_weights) against each loop simulation, each the median
/// over the run's steps after the first (the first pays warm-up costs a
/// plan does not model); throughput per GPU (perf/throughput) against the
/// plan's tokens per step over the loop's step and the actor GPUs; MFU
/// (perf/mfu/actor) against the plan's; the actor's peak allocated memory
/// (perf/max_memory_allocated_gb, GiB) against the plan's actor memory
/// less its CUDA/NCCL reserve.
std::vector<PredictionRow> VerlPredictions(const PlanPredictions& p, const RunData& run);

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
/// run_id,predicted,by,predicted_value,measured,ratio: one line per row
/// (values in their shortest exact form, a missing one empty).
std::string PredictionsCsv(const std::vector<std::pair<std::int64_t, std::vector<PredictionRow>>>& by_run);

}  // namespace kp

#endif  // KIMI_PLAN_REPORT_SUMMARY_H_
