// A run as the report reads it: its record, the plan its configuration
// names, and its per-step metrics by column name. Metrics are looked up by
// name, so a column a later migration adds (an optional `reward`) is read,
// compared, exported and plotted without a change here.
//
// Thread-safety: plain values; LoadRun reads the store from the caller's thread.
#ifndef KIMI_PLAN_REPORT_RUN_DATA_H_
#define KIMI_PLAN_REPORT_RUN_DATA_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/process_table.h"
#include "common/status.h"
#include "store/store.h"

namespace kp {

/// How a metric is labelled and printed.
struct MetricInfo {
  std::string name;   ///< the steps column, e.g. "grad_norm"
  std::string label;  ///< for people, e.g. "grad norm"
  int digits = 6;     ///< decimals when printed (loss 6, grad norm 4, as seed 003's tables)
};

/// Known metrics get their label and digits; any other column its own name
/// and 6 decimals.
MetricInfo DescribeMetric(const std::string& name);
/// `value` with the metric's decimals.
std::string FormatMetric(const std::string& metric, double value);

struct RunData {
  RunRecord run;
  StepColumns steps;
  std::int64_t plan_id = 0;  ///< config_json's "plan_id"; 0 when it names none
  /// Whether the process recording a run still marked running is alive.
  Liveness process = Liveness::kUnknown;

  /// Whether the steps table has this column at all.
  bool HasMetric(const std::string& metric) const;
  /// Whether the column has at least one non-NULL value in this run.
  bool LogsMetric(const std::string& metric) const;
  /// The metric at `step`; nullopt when the step was not logged, the column
  /// does not exist or the value is NULL.
  std::optional<double> At(const std::string& metric, int step) const;
  /// (step, value) of every logged, non-NULL value, in step order.
  std::vector<std::pair<int, double>> Series(const std::string& metric) const;
};

/// Reads a run and its steps. `flag` names the option the id came from, for
/// the error: "--reference: no run with id 9". With `processes`, a run still
/// marked running has its process looked up.
Result<RunData> LoadRun(const Store& store, std::int64_t id, const std::string& flag,
                        const ProcessTable* processes = nullptr);

/// Whether the process recording `run` still runs, when the run is still
/// marked running and `processes` can tell; kUnknown otherwise.
Liveness ProcessOf(const RunRecord& run, const ProcessTable* processes);
/// How a run stands: "finished", "failed", "running", "ended" (still marked
/// running, its process gone: killed without a word) or "unknown" (recorded
/// before the store kept a status).
std::string RunState(const RunRecord& run, Liveness process);
std::string RunState(const RunData& run);
/// Every value RunState returns, in that order.
const std::vector<std::string>& RunStates();

/// An ingested Verl run's columns under the names the native runtime's
/// steps have, so lists, summaries and plots treat both alike: step_time_s
/// (timing_s/step), tokens_per_s (perf/total_num_tokens over
/// timing_s/step: every token of the step), peak_memory_bytes
/// (perf/max_memory_allocated_gb, GiB), grad_norm, lr (actor/...), reward
/// (critic/score/mean). A column is added only where Verl's exists and
/// never replaces one of Verl's own.
void AddVerlCommonColumns(StepColumns* steps);

/// The plan id a run configuration names ("plan_id", a positive integer), 0
/// when none or when the text is not JSON.
std::int64_t PlanIdOfConfig(const std::string& config_json);

}  // namespace kp

#endif  // KIMI_PLAN_REPORT_RUN_DATA_H_
