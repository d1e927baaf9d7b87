#include "report/run_data.h"

#include <algorithm>
#include <functional>

#include <nlohmann/json.hpp>

#include "common/table.h"

namespace kp {

MetricInfo DescribeMetric(const std::string& name) {
  static const MetricInfo kKnown[] = {
      {"loss", "loss", 6},
      {"grad_norm", "grad norm", 4},
      {"reward", "reward", 4},
      {"lr", "lr", 8},
      {"tokens_per_s", "tokens/s", 1},
      {"step_time_s", "step time s", 4},
      {"peak_memory_bytes", "peak memory bytes", 0},
  };
  for (const MetricInfo& m : kKnown)
    if (m.name == name) return m;
  return {name, name, 6};
}

std::string FormatMetric(const std::string& metric, double value) {
  return FormatFixed(value, DescribeMetric(metric).digits);
}

namespace {

int ColumnIndex(const StepColumns& s, const std::string& metric) {
  const auto it = std::find(s.names.begin(), s.names.end(), metric);
  return it == s.names.end() ? -1 : static_cast<int>(it - s.names.begin());
}

}  // namespace

bool RunData::HasMetric(const std::string& metric) const { return ColumnIndex(steps, metric) >= 0; }

bool RunData::LogsMetric(const std::string& metric) const { return !Series(metric).empty(); }

std::optional<double> RunData::At(const std::string& metric, int step) const {
  const int c = ColumnIndex(steps, metric);
  if (c < 0) return std::nullopt;
  const auto it = std::lower_bound(steps.steps.begin(), steps.steps.end(), step);
  if (it == steps.steps.end() || *it != step) return std::nullopt;
  return steps.values[c][it - steps.steps.begin()];
}

std::vector<std::pair<int, double>> RunData::Series(const std::string& metric) const {
  std::vector<std::pair<int, double>> out;
  const int c = ColumnIndex(steps, metric);
  if (c < 0) return out;
  for (size_t i = 0; i < steps.steps.size(); ++i)
    if (steps.values[c][i]) out.emplace_back(steps.steps[i], *steps.values[c][i]);
  return out;
}

std::int64_t PlanIdOfConfig(const std::string& config_json) {
  const nlohmann::json j = nlohmann::json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("plan_id") || !j["plan_id"].is_number_integer()) return 0;
  const std::int64_t id = j["plan_id"].get<std::int64_t>();
  return id > 0 ? id : 0;
}

Result<RunData> LoadRun(const Store& store, std::int64_t id, const std::string& flag,
                        const ProcessTable* processes) {
  Result<RunRecord> run = store.GetRun(id);
  if (!run.ok()) {
    if (run.status().code() == Status::Code::kNotFound)
      return Status::NotFound(flag + ": no run with id " + std::to_string(id));
    return run.status();
  }
  RunData d;
  d.run = *run;
  d.plan_id = PlanIdOfConfig(d.run.config_json);
  d.process = ProcessOf(d.run, processes);
  if (d.run.source.empty()) {
    KP_ASSIGN_OR_RETURN(d.steps, store.ListStepColumns(id));
  } else {
    KP_ASSIGN_OR_RETURN(d.steps, store.ListMetricColumns(id));
    AddVerlCommonColumns(&d.steps);
  }
  return d;
}

void AddVerlCommonColumns(StepColumns* s) {
  auto column = [&](const std::string& name) -> const std::vector<std::optional<double>>* {
    const int c = ColumnIndex(*s, name);
    return c < 0 ? nullptr : &s->values[c];
  };
  auto add = [&](const std::string& name, const std::function<std::optional<double>(std::size_t)>& value) {
    if (ColumnIndex(*s, name) >= 0) return;
    std::vector<std::optional<double>> v;
    bool any = false;
    for (std::size_t i = 0; i < s->steps.size(); ++i) {
      v.push_back(value(i));
      any = any || v.back().has_value();
    }
    if (!any) return;
    s->names.push_back(name);
    s->values.push_back(std::move(v));
  };
  // Each source column is found once; `add` appends only after its loop,
  // so the pointer stays valid while it is read.
  auto copy = [&](const char* from, double scale) {
    return [c = column(from), scale](std::size_t i) -> std::optional<double> {
      return c && (*c)[i] ? std::optional<double>(*(*c)[i] * scale) : std::nullopt;
    };
  };
  add("step_time_s", copy("timing_s/step", 1));
  add("grad_norm", copy("actor/grad_norm", 1));
  add("lr", copy("actor/lr", 1));
  add("reward", copy("critic/score/mean", 1));
  add("peak_memory_bytes", copy("perf/max_memory_allocated_gb", 1024.0 * 1024 * 1024));  // Verl's GiB
  // Every token of the step (prompts and responses) over the step's time,
  // as the native runtime's tokens_per_s counts a step's tokens.
  add("tokens_per_s", [tokens = column("perf/total_num_tokens"), time = column("timing_s/step")](
                          std::size_t i) -> std::optional<double> {
    if (!tokens || !time || !(*tokens)[i] || !(*time)[i] || *(*time)[i] <= 0) return std::nullopt;
    return *(*tokens)[i] / *(*time)[i];
  });
}

Liveness ProcessOf(const RunRecord& run, const ProcessTable* processes) {
  if (!processes || run.status != "running") return Liveness::kUnknown;
  return processes->Check({run.host, run.pid});
}

std::string RunState(const RunRecord& run, Liveness process) {
  const std::string& s = run.status;
  if (s == "finished" || s == "failed") return s;
  if (s == "running") return process == Liveness::kGone ? "ended" : "running";
  return "unknown";
}

std::string RunState(const RunData& run) { return RunState(run.run, run.process); }

const std::vector<std::string>& RunStates() {
  static const std::vector<std::string> states = {"finished", "failed", "running", "ended", "unknown"};
  return states;
}

}  // namespace kp
