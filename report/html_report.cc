#include "report/html_report.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "common/table.h"
#include "simulator/gantt.h"
#include "simulator/pipeline_sim.h"
#include "schedules/schedule_generators.h"
#include "specs/schedule_kind.h"

namespace kp {

namespace {

using nlohmann::json;

std::string Cell(const std::string& tag, const std::string& text) {
  return "<" + tag + ">" + EscapeXml(text) + "</" + tag + ">";
}

std::string HtmlTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::string out = "<table><tr>";
  for (const std::string& h : header) out += Cell("th", h);
  out += "</tr>\n";
  for (const auto& row : rows) {
    out += "<tr>";
    for (const std::string& c : row) out += Cell("td", c);
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

std::string RunsSection(const std::vector<RunListEntry>& list) {
  std::vector<std::vector<std::string>> rows;
  for (const RunListEntry& e : list)
    rows.push_back({std::to_string(e.id), e.kind, e.model, e.created_at, StatusLine(e), StepsOf(e),
                    e.last_loss ? FormatMetric("loss", *e.last_loss) : "-", e.plan_id ? std::to_string(e.plan_id) : "-"});
  return "<h2>Runs</h2>\n" +
         HtmlTable({"run", "kind", "model", "created", "status", "steps", "last loss", "plan"}, rows);
}

// The seed's cell: the raw value in code style, beneath it the change.
std::string ComparisonSection(const Comparison& c) {
  std::string out = "<h2>Comparison</h2>\n<table><tr><th>run</th>";
  for (const std::string& m : c.metrics)
    for (size_t i = 0; i < c.steps.size(); ++i)
      out += Cell("th", (i == 0 ? DescribeMetric(m).label + ", step " : "step ") + std::to_string(c.steps[i]));
  out += "</tr>\n";
  for (const CompareRow& row : c.rows) {
    out += "<tr>" + Cell("td", row.label + (row.is_reference ? " (reference)" : ""));
    for (const CompareCell& cell : row.cells)
      out += "<td><code>" + EscapeXml(cell.value ? FormatMetric(cell.metric, *cell.value) : "-") + "</code>" +
             (row.is_reference ? "" : "<br>" + EscapeXml(cell.change)) + "</td>";
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

std::string PredictionsSection(const std::vector<std::pair<std::int64_t, std::vector<PredictionRow>>>& by_run) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& [run, preds] : by_run)
    for (const PredictionRow& r : preds) {
      const bool bytes = r.what.find("bytes") != std::string::npos;
      auto show = [&](double v) { return bytes ? FormatGB(v) : FormatFixed(v, 4); };
      const std::optional<double> ratio = r.Ratio();
      rows.push_back({std::to_string(run), r.what, r.source, show(r.predicted), r.measured ? show(*r.measured) : "-",
                      r.measured && r.predicted != 0 ? ChangeText(*r.measured, r.predicted) : "-",
                      ratio ? FormatFixed(*ratio, 3) : "-"});
    }
  if (rows.empty()) return "";
  return "<h2>Predicted against measured</h2>\n" +
         HtmlTable({"run", "predicted", "by", "predicted value", "measured", "measured vs predicted", "ratio"}, rows);
}

std::string Figure(const std::string& svg) { return "<figure>" + svg + "</figure>\n"; }

// One plot of `metric` over steps for every run that logs it (scaled by
// `scale` into the axis's unit); none when no run does.
std::string CurveIfLogged(const std::vector<RunData>& runs, const std::string& metric, const std::string& title,
                          const std::string& unit, double scale = 1) {
  std::vector<PlotSeries> series = MetricSeries(runs, metric);
  if (series.empty()) return "";
  for (PlotSeries& s : series)
    for (auto& [x, y] : s.points) y *= scale;
  return Figure(LinePlotSvg(title, "step", unit, series));
}

std::string CurvesSection(const std::vector<RunData>& runs) {
  std::string out = "<h2>Curves</h2>\n";
  out += CurveIfLogged(runs, "loss", "loss", "loss (nats)") + CurveIfLogged(runs, "reward", "reward", "reward") +
         CurveIfLogged(runs, "grad_norm", "grad norm", "grad norm");
  // Throughput, step time and memory for every run, native or Verl (an
  // ingested run's common columns, run_data.h).
  out += CurveIfLogged(runs, "tokens_per_s", "tokens/s (every token of the step)", "tokens/s") +
         CurveIfLogged(runs, "step_time_s", "step time", "seconds") +
         CurveIfLogged(runs, "peak_memory_bytes", "peak memory per GPU", "GB", 1e-9);
  return out;
}

// A Verl run's phases over its steps, each beside its prediction (dashed,
// flat over the run's steps).
std::string PhasesSection(const std::vector<RunData>& runs,
                          const std::vector<std::pair<std::int64_t, std::vector<PredictionRow>>>& predictions) {
  std::string out;
  struct Phase {
    const char* metric;  // Verl's
    const char* what;    // the prediction's (summary.h)
    const char* label;   // short, for the legend
  };
  const Phase phases[] = {{"timing_s/step", "loop step s", "step"},
                          {"timing_s/gen", "generation s", "gen"},
                          {"timing_s/update_actor", "training s", "update_actor"},
                          {"timing_s/update_weights", "weight sync s", "update_weights"}};
  for (const RunData& run : runs) {
    if (run.run.kind != "verl" || run.steps.steps.empty()) continue;
    const double first = run.steps.steps.front(), last = run.steps.steps.back();
    std::vector<PlotSeries> series;
    std::string by;
    for (const Phase& phase : phases) {
      PlotSeries measured{phase.label, {}};
      for (const auto& [step, v] : run.Series(phase.metric)) measured.points.emplace_back(step, v);
      if (measured.points.empty()) continue;
      series.push_back(std::move(measured));
      for (const auto& [id, rows] : predictions)
        if (id == run.run.id)
          for (const PredictionRow& r : rows)
            if (r.what == phase.what && r.source.rfind("simulation", 0) == 0) {
              series.push_back({std::string(phase.label) + " (predicted)", {{first, r.predicted}, {last, r.predicted}},
                                /*dashed=*/true});
              by = r.source;
            }
    }
    if (series.empty()) continue;
    out += "<figure>" +
           LinePlotSvg("run " + std::to_string(run.run.id) + ": Verl's phases (timing_s/...)", "step", "seconds",
                       series) +
           "<figcaption>" +
           EscapeXml(by.empty() ? "no loop simulation recorded against the run's plan"
                                : "dashed: the prediction of " + by + " for the plan the run was launched from") +
           "</figcaption></figure>\n";
  }
  return out.empty() ? "" : "<h2>Phases</h2>\n" + out;
}

Result<std::string> MemorySection(const PlanRecord& plan) {
  KP_ASSIGN_OR_RETURN(std::vector<Bar> bars, MemoryBars(plan));
  const std::optional<BarMark> capacity = CapacityMark(plan);
  return "<h2>Memory per GPU: plan " + std::to_string(plan.id) + "</h2>\n<figure>" +
         StackedBarsSvg("plan " + std::to_string(plan.id) + " (" + plan.model + " on " + std::to_string(plan.world) +
                            " x " + plan.gpu + ")",
                        bars, [](double v) { return FormatGB(v); }, capacity) +
         "</figure>\n";
}

Result<std::string> GanttSection(const SimulationRecord& sim) {
  KP_ASSIGN_OR_RETURN(GanttFigure g, PipelineGantt(sim));
  return "<h2>Pipeline: simulation " + std::to_string(sim.id) + "</h2>\n<figure>" + g.svg + "<figcaption>" +
         EscapeXml(g.caption) + "</figcaption></figure>\n";
}

std::string SyncSection(const std::vector<SimulationRecord>& syncs) {
  return "<h2>Weight sync</h2>\n<figure>" +
         StackedBarsSvg("trainer to rollout weight update, total seconds", SyncBars(syncs),
                        [](double s) { return s >= 1 ? FormatFixed(s, 2) + " s" : FormatFixed(s * 1e3, 1) + " ms"; }) +
         "</figure>\n";
}

double Us(const json& request, const char* key) { return request.value(key, 0.0); }

Nanoseconds UsToNs(double us) { return Nanoseconds(static_cast<std::int64_t>(std::llround(us * 1000))); }

constexpr const char* kStyle =
    "body{font-family:sans-serif;margin:24px;color:#222;background:#fff}"
    "table{border-collapse:collapse;margin:8px 0 16px}"
    "th,td{border:1px solid #ccc;padding:3px 8px;text-align:right;font-size:13px}"
    "th:first-child,td:first-child{text-align:left}"
    "figure{margin:8px 0 20px}figcaption{font-size:12px;color:#555}svg{max-width:100%;height:auto}";

}  // namespace

std::vector<PlotSeries> MetricSeries(const std::vector<RunData>& runs, const std::string& metric) {
  std::vector<PlotSeries> out;
  for (const RunData& r : runs) {
    PlotSeries s{"run " + std::to_string(r.run.id) + " (" + r.run.model + ")", {}};
    for (const auto& [step, v] : r.Series(metric)) s.points.emplace_back(step, v);
    if (!s.points.empty()) out.push_back(std::move(s));
  }
  return out;
}

Result<std::vector<Bar>> MemoryBars(const PlanRecord& plan) {
  const json r = json::parse(plan.result_json, nullptr, false);
  if (!r.is_object() || !r.contains("memory") || !r["memory"].is_object())
    return Status::InvalidArgument("--plan: plan " + std::to_string(plan.id) + " has no memory breakdown");
  std::vector<Bar> bars;
  for (const char* role : {"actor", "reference", "rollout"}) {
    if (!r["memory"].contains(role)) continue;
    const json& m = r["memory"][role];
    Bar b{role, {}};
    for (const char* part : {"weights", "grads", "optimizer", "activations", "other"})
      b.segments.push_back({part, m.value(std::string(part) + "_bytes", 0.0)});
    bars.push_back(std::move(b));
  }
  return bars;
}

std::optional<BarMark> CapacityMark(const PlanRecord& plan) {
  const json r = json::parse(plan.result_json, nullptr, false);
  if (!r.is_object() || !r.contains("memory") || !r["memory"].contains("actor")) return std::nullopt;
  const double capacity = r["memory"]["actor"].value("capacity_bytes", 0.0);
  if (capacity <= 0) return std::nullopt;
  return BarMark{capacity, plan.gpu + ": " + FormatGB(capacity)};
}

Result<GanttFigure> PipelineGantt(const SimulationRecord& sim) {
  const json q = json::parse(sim.request_json, nullptr, false);
  const std::string flag = "--simulation: simulation " + std::to_string(sim.id);
  if (!q.is_object() || !q.contains("schedule")) return Status::InvalidArgument(flag + " has no pipeline request");
  if (q.contains("schedule_csv") && !q["schedule_csv"].is_null())
    return Status::InvalidArgument(flag + " replayed a schedule CSV file; it is not redrawn");
  KP_ASSIGN_OR_RETURN(ScheduleKind kind, ParseSchedule(q["schedule"].get<std::string>(), "--simulation"));
  KP_ASSIGN_OR_RETURN(PipelineSchedule schedule,
                      GenerateSchedule(kind, q.value("pp", 1), q.value("vp", 1), q.value("microbatches", 1)));
  const StageCosts costs{UsToNs(Us(q, "f_us")), UsToNs(Us(q, "b_us")), UsToNs(Us(q, "w_us")), UsToNs(Us(q, "p2p_us"))};
  KP_ASSIGN_OR_RETURN(PipelineSimResult r, SimulatePipeline(schedule, costs, PipelineSimOptions{}));
  const json recorded = json::parse(sim.result_json, nullptr, false);
  const double recorded_us = recorded.is_object() ? recorded.value("makespan_us", 0.0) : 0.0;
  GanttFigure g{GanttSvg(r, schedule), "simulation " + std::to_string(sim.id) + " redrawn from its request: makespan " +
                                           FormatFixed(r.makespan.value() / 1e3, 1) + " us"};
  if (q.contains("attnres_cache") && !q["attnres_cache"].is_null())
    g.caption += "; every hop drawn at the hidden-state transfer, without the attention-residual blocks (recorded "
                 "makespan " + FormatFixed(recorded_us, 1) + " us, attnres cache " +
                 q["attnres_cache"].get<std::string>() + ")";
  return g;
}

std::vector<Bar> SyncBars(const std::vector<SimulationRecord>& syncs) {
  std::vector<Bar> bars;
  for (const SimulationRecord& s : syncs) {
    const json r = json::parse(s.result_json, nullptr, false);
    if (!r.is_object()) continue;
    const std::string label = "#" + std::to_string(s.id) + " " + r.value("model", "") + " " + r.value("mode", "");
    bars.push_back({label + ", TCP", {{"seconds", r.value("tcp_s", 0.0)}}});
    bars.push_back({label + ", RDMA", {{"seconds", r.value("rdma_s", 0.0)}}});
  }
  return bars;
}

Result<std::string> HtmlReport(const HtmlReportInput& in) {
  std::string body = "<h1>" + EscapeXml(in.title) + "</h1>\n";
  if (!in.run_list.empty()) body += RunsSection(in.run_list);
  if (in.comparison) body += ComparisonSection(*in.comparison);
  body += PredictionsSection(in.predictions);
  if (!in.runs.empty()) body += CurvesSection(in.runs) + PhasesSection(in.runs, in.predictions);
  if (in.plan) {
    KP_ASSIGN_OR_RETURN(std::string memory, MemorySection(*in.plan));
    body += memory;
  }
  if (in.pipeline) {
    KP_ASSIGN_OR_RETURN(std::string gantt, GanttSection(*in.pipeline));
    body += gantt;
  }
  if (!in.syncs.empty()) body += SyncSection(in.syncs);
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + EscapeXml(in.title) +
         "</title><style>" + kStyle + "</style></head>\n<body>\n" + body + "</body></html>\n";
}

}  // namespace kp
