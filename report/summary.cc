#include "report/summary.h"

#include <algorithm>
#include <cmath>

#include "common/csv.h"
#include "common/table.h"
#include "report/compare.h"

namespace kp {

namespace {

using nlohmann::json;

json Opt(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }
json OptInt(const std::optional<int>& v) { return v ? json(*v) : json(nullptr); }

double Mean(std::vector<std::pair<int, double>>::const_iterator from,
            std::vector<std::pair<int, double>>::const_iterator to) {
  double sum = 0;
  for (auto it = from; it != to; ++it) sum += it->second;
  return sum / static_cast<double>(to - from);
}

std::string Or(const std::optional<double>& v, const std::string& metric) {
  return v ? FormatMetric(metric, *v) : "-";
}

json StatsJson(const MetricStats& s) {
  return {{"first", Opt(s.first)}, {"last", Opt(s.last)}, {"first_tenth_mean", Opt(s.first_tenth_mean)},
          {"last_tenth_mean", Opt(s.last_tenth_mean)}, {"median", Opt(s.median)}, {"max", Opt(s.max)}};
}

// The measured counterpart of a prediction: the median step, since the
// first steps of a run pay warm-up costs a plan does not model.
std::optional<double> MedianStep(const RunData& run) { return Stats(run.Series("step_time_s")).median; }

std::string SignedChange(double measured, double predicted) {
  return predicted == 0 ? "n/a" : ChangeText(measured, predicted);
}

}  // namespace

RunListEntry ListEntry(const RunData& run) {
  RunListEntry e;
  e.id = run.run.id;
  e.kind = run.run.kind;
  e.model = run.run.model;
  e.created_at = run.run.created_at;
  e.steps = static_cast<int>(run.steps.steps.size());
  e.plan_id = run.plan_id;
  e.status = RunState(run);
  e.error = run.run.error;
  const json config = json::parse(run.run.config_json, nullptr, false);
  if (config.is_object() && config.contains("steps") && config["steps"].is_number_integer())
    e.planned_steps = config["steps"].get<int>();
  const auto loss = run.Series("loss");
  if (!loss.empty() && loss.back().first == run.steps.steps.back()) e.last_loss = loss.back().second;
  return e;
}

MetricStats Stats(const std::vector<std::pair<int, double>>& series) {
  MetricStats s;
  if (series.empty()) return s;
  const size_t n = series.size(), tenth = (n + 9) / 10;
  s.first = series.front().second;
  s.last = series.back().second;
  s.first_tenth_mean = Mean(series.begin(), series.begin() + tenth);
  s.last_tenth_mean = Mean(series.end() - tenth, series.end());
  std::vector<double> v;
  for (const auto& p : series) v.push_back(p.second);
  std::sort(v.begin(), v.end());
  s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  s.max = v.back();
  return s;
}

PlanPredictions PredictionsOf(const PlanRecord& plan, const std::vector<SimulationRecord>& simulations) {
  PlanPredictions p;
  p.plan_id = plan.id;
  if (plan.step_time_s > 0) p.step_time_s = plan.step_time_s;
  const json r = json::parse(plan.result_json, nullptr, false);
  if (r.is_object() && r.contains("memory") && r["memory"].contains("actor")) {
    const json& actor = r["memory"]["actor"];
    p.actor_total_bytes = actor.value("total_bytes", 0.0);
    if (actor.contains("details") && actor["details"].is_object())
      p.actor_reserve_bytes = actor["details"].value("CUDA/NCCL reserve", 0.0);
  }
  if (r.is_object()) {
    if (r.contains("mfu") && r["mfu"].is_number()) p.mfu = r["mfu"].get<double>();
    if (r.contains("step") && r["step"].is_object() && r["step"].contains("tokens_per_step"))
      p.tokens_per_step = r["step"]["tokens_per_step"].get<double>();
    if (r.contains("cluster") && r["cluster"].is_object()) p.actor_gpus = r["cluster"].value("actor_gpus", 0);
  }
  for (const SimulationRecord& sim : simulations) {
    if (sim.plan_id != plan.id) continue;
    const json j = json::parse(sim.result_json, nullptr, false);
    if (!j.is_object()) continue;
    if (sim.kind == "loop" && j.contains("step_time_s")) {
      p.simulations.emplace_back(sim, j["step_time_s"].get<double>());
      PlanPredictions::Loop loop{sim.id, j["step_time_s"].get<double>(), {}};
      if (j.contains("costs_s") && j["costs_s"].is_object())
        for (const auto& [phase, seconds] : j["costs_s"].items())
          if (seconds.is_number()) loop.costs_s[phase] = seconds.get<double>();
      p.loops.push_back(std::move(loop));
    }
    if (sim.kind == "pipeline" && j.contains("makespan_us"))
      p.simulations.emplace_back(sim, j["makespan_us"].get<double>() / 1e6);
  }
  return p;
}

std::optional<double> PredictionRow::Ratio() const {
  if (!measured || predicted == 0) return std::nullopt;
  return *measured / predicted;
}

std::vector<PredictionRow> VerlPredictions(const PlanPredictions& p, const RunData& run) {
  std::vector<PredictionRow> rows;
  const std::string plan = "plan " + std::to_string(p.plan_id);
  // The median after the first step, which compiles, warms caches and
  // loads the rollout engine.
  auto median = [&](const std::string& metric) {
    std::vector<std::pair<int, double>> s = run.Series(metric);
    if (s.size() > 1) s.erase(s.begin());
    return Stats(s).median;
  };
  for (const PlanPredictions::Loop& loop : p.loops) {
    const std::string by = "simulation " + std::to_string(loop.id) + " (loop)";
    rows.push_back({"loop step s", by, loop.step_time_s, median("timing_s/step")});
    auto phase = [&](const char* what, const char* cost, const char* metric) {
      auto it = loop.costs_s.find(cost);
      if (it != loop.costs_s.end()) rows.push_back({what, by, it->second, median(metric)});
    };
    phase("generation s", "rollout", "timing_s/gen");
    phase("training s", "train", "timing_s/update_actor");
    phase("weight sync s", "sync", "timing_s/update_weights");
    if (p.tokens_per_step && p.actor_gpus > 0 && loop.step_time_s > 0)
      rows.push_back({"throughput tokens/s per GPU", by, *p.tokens_per_step / (loop.step_time_s * p.actor_gpus),
                      median("perf/throughput")});
  }
  if (p.step_time_s) rows.push_back({"training s", plan, *p.step_time_s, median("timing_s/update_actor")});
  if (p.mfu) rows.push_back({"MFU", plan, *p.mfu, median("perf/mfu/actor")});
  if (p.actor_total_bytes) {
    const std::vector<std::pair<int, double>> peak = run.Series("perf/max_memory_allocated_gb");
    std::optional<double> most = Stats(peak).max;
    if (most) *most *= 1024.0 * 1024 * 1024;
    rows.push_back({"actor memory per GPU bytes (allocated)", plan, *p.actor_total_bytes - p.actor_reserve_bytes, most});
  }
  return rows;
}

std::vector<PredictionRow> PredictedVsMeasured(const PlanPredictions& p, const RunData& run) {
  if (run.run.kind == "verl") return VerlPredictions(p, run);
  std::vector<PredictionRow> rows;
  const std::string plan = "plan " + std::to_string(p.plan_id);
  if (p.step_time_s) rows.push_back({"actor step time s", plan, *p.step_time_s, MedianStep(run)});
  if (p.actor_total_bytes)
    rows.push_back({"actor memory per GPU bytes", plan, *p.actor_total_bytes, Stats(run.Series("peak_memory_bytes")).max});
  for (const auto& [sim, seconds] : p.simulations)
    rows.push_back({sim.kind == "loop" ? "SDPO loop step s" : "pipeline step s",
                    "simulation " + std::to_string(sim.id) + " (" + sim.kind + ")", seconds, MedianStep(run)});
  return rows;
}

RunSummary Summarise(const RunData& run, const std::optional<PlanPredictions>& plan) {
  RunSummary s;
  s.entry = ListEntry(run);
  s.config_json = run.run.config_json;
  if (!run.steps.steps.empty()) {
    s.first_step = run.steps.steps.front();
    s.last_step = run.steps.steps.back();
  }
  s.loss = Stats(run.Series("loss"));
  s.grad_norm = Stats(run.Series("grad_norm"));
  s.tokens_per_s = Stats(run.Series("tokens_per_s"));
  s.step_time_s = Stats(run.Series("step_time_s"));
  s.peak_memory_bytes = Stats(run.Series("peak_memory_bytes"));
  if (run.LogsMetric("reward")) s.reward = Stats(run.Series("reward"));
  if (plan) s.predictions = PredictedVsMeasured(*plan, run);
  return s;
}

std::string StepsOf(const RunListEntry& e) {
  return std::to_string(e.steps) + (e.planned_steps ? " of " + std::to_string(*e.planned_steps) : "");
}

std::string StatusLine(const RunListEntry& e) {
  if (e.status == "failed") return "failed: " + e.error;
  if (e.status == "ended") return "ended without a word: still marked running, its process is gone (killed?)";
  if (e.status == "unknown") return "unknown (recorded before the store kept a status)";
  return e.status;
}

std::string RenderRunList(const std::vector<RunListEntry>& runs, const std::vector<TableCount>& tables) {
  Table t({"run", "kind", "model", "created", "status", "steps", "last loss", "plan"});
  for (const RunListEntry& e : runs)
    t.AddRow({std::to_string(e.id), e.kind, e.model, e.created_at, e.status, StepsOf(e), Or(e.last_loss, "loss"),
              e.plan_id ? std::to_string(e.plan_id) : "-"});
  std::string out = runs.empty() ? "no runs recorded\n" : t.Render();
  out += "\nstore:";
  for (size_t i = 0; i < tables.size(); ++i)
    out += std::string(i ? "," : "") + " " + std::to_string(tables[i].rows) + " " + tables[i].table;
  return out + "\n";
}

std::string RenderPredictions(const std::vector<std::pair<std::int64_t, std::vector<PredictionRow>>>& by_run) {
  Table t({"run", "predicted", "by", "predicted value", "measured", "measured vs predicted", "ratio"});
  for (const auto& [run, rows] : by_run)
    for (const PredictionRow& r : rows) {
      const bool bytes = r.what.find("bytes") != std::string::npos;
      auto show = [&](double v) { return bytes ? FormatGB(v) : FormatFixed(v, 4); };
      const std::optional<double> ratio = r.Ratio();
      t.AddRow({std::to_string(run), r.what, r.source, show(r.predicted), r.measured ? show(*r.measured) : "-",
                r.measured ? SignedChange(*r.measured, r.predicted) : "-", ratio ? FormatFixed(*ratio, 3) : "-"});
    }
  return t.Render();
}

std::string RenderSummary(const RunSummary& s) {
  const RunListEntry& e = s.entry;
  std::string out = "run " + std::to_string(e.id) + ": " + e.kind + ", " + e.model + ", created " + e.created_at + "\n" +
                    "config  " + s.config_json + "\n" + "status  " + StatusLine(e) + "\n" + "steps   " + StepsOf(e);
  if (e.steps) out += " (" + std::to_string(s.first_step) + " to " + std::to_string(s.last_step) + ")";
  out += "\n\n";
  Table t({"metric", "first", "first tenth mean", "last tenth mean", "last", "median", "max"});
  auto row = [&](const std::string& metric, const MetricStats& m) {
    t.AddRow({DescribeMetric(metric).label, Or(m.first, metric), Or(m.first_tenth_mean, metric),
              Or(m.last_tenth_mean, metric), Or(m.last, metric), Or(m.median, metric), Or(m.max, metric)});
  };
  row("loss", s.loss);
  if (s.reward) row("reward", *s.reward);
  row("grad_norm", s.grad_norm);
  row("tokens_per_s", s.tokens_per_s);
  row("step_time_s", s.step_time_s);
  out += t.Render();
  out += "\npeak memory  " + (s.peak_memory_bytes.max ? FormatGB(*s.peak_memory_bytes.max) : std::string("-")) + "\n";
  if (!s.predictions.empty())
    out += "\npredicted against measured (plan " + std::to_string(e.plan_id) + ")\n" +
           RenderPredictions({{e.id, s.predictions}});
  return out;
}

json RunListJson(const std::vector<RunListEntry>& runs, const std::vector<TableCount>& tables) {
  json list = json::array(), counts = json::object();
  for (const RunListEntry& e : runs)
    list.push_back({{"id", e.id}, {"kind", e.kind}, {"model", e.model}, {"created_at", e.created_at},
                    {"steps", e.steps}, {"planned_steps", OptInt(e.planned_steps)}, {"status", e.status},
                    {"error", e.error.empty() ? json(nullptr) : json(e.error)}, {"last_loss", Opt(e.last_loss)},
                    {"plan_id", e.plan_id ? json(e.plan_id) : json(nullptr)}});
  for (const TableCount& t : tables) counts[t.table] = t.rows;
  return {{"runs", list}, {"tables", counts}};
}

json PredictionsJson(const std::vector<PredictionRow>& rows) {
  json out = json::array();
  for (const PredictionRow& r : rows)
    out.push_back({{"what", r.what}, {"source", r.source}, {"predicted", r.predicted}, {"measured", Opt(r.measured)},
                   {"ratio", Opt(r.Ratio())}});
  return out;
}

json SummaryJson(const RunSummary& s) {
  const RunListEntry& e = s.entry;
  json metrics = {{"loss", StatsJson(s.loss)}, {"grad_norm", StatsJson(s.grad_norm)},
                  {"tokens_per_s", StatsJson(s.tokens_per_s)}, {"step_time_s", StatsJson(s.step_time_s)},
                  {"peak_memory_bytes", StatsJson(s.peak_memory_bytes)}};
  if (s.reward) metrics["reward"] = StatsJson(*s.reward);
  return {{"id", e.id}, {"kind", e.kind}, {"model", e.model}, {"created_at", e.created_at},
          {"config", json::parse(s.config_json, nullptr, false)}, {"status", e.status},
          {"error", e.error.empty() ? json(nullptr) : json(e.error)}, {"steps", e.steps},
          {"planned_steps", OptInt(e.planned_steps)},
          {"first_step", s.first_step}, {"last_step", s.last_step}, {"metrics", metrics},
          {"plan_id", e.plan_id ? json(e.plan_id) : json(nullptr)}, {"predictions", PredictionsJson(s.predictions)}};
}

std::string RunListCsv(const std::vector<RunListEntry>& runs) {
  std::string out = "run_id,kind,model,created_at,steps,last_loss,plan_id,status,planned_steps\n";
  for (const RunListEntry& e : runs)
    out += CsvRow({std::to_string(e.id), e.kind, e.model, e.created_at, std::to_string(e.steps),
                   e.last_loss ? FormatShortest(*e.last_loss) : "", e.plan_id ? std::to_string(e.plan_id) : "", e.status,
                   e.planned_steps ? std::to_string(*e.planned_steps) : ""});
  return out;
}

std::string PredictionsCsv(const std::vector<std::pair<std::int64_t, std::vector<PredictionRow>>>& by_run) {
  std::string out = "run_id,predicted,by,predicted_value,measured,ratio\n";
  auto value = [](const std::optional<double>& v) { return v ? FormatShortest(*v) : std::string(); };
  for (const auto& [run, rows] : by_run)
    for (const PredictionRow& r : rows)
      out += CsvRow({std::to_string(run), r.what, r.source, FormatShortest(r.predicted), value(r.measured),
                     value(r.Ratio())});
  return out;
}

std::string StepsCsv(const RunData& run) {
  std::string out = "step";
  for (const std::string& n : run.steps.names) out += "," + CsvField(n);
  out += "\n";
  for (size_t i = 0; i < run.steps.steps.size(); ++i) {
    out += std::to_string(run.steps.steps[i]);
    for (const auto& column : run.steps.values) out += "," + (column[i] ? FormatShortest(*column[i]) : std::string());
    out += "\n";
  }
  return out;
}

}  // namespace kp
