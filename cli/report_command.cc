// `kimi-plan report`: reads the store and lists runs, summarises one, or
// compares runs against a reference in seed 003's table style; exports CSV,
// JSON and a self-contained HTML page. Everything is validated and computed
// before the first file is written, so bad input writes nothing; the store is
// only read, and a missing store file is an error rather than a new file.
#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/output_paths.h"
#include "cli/options.h"
#include "common/text.h"
#include "report/compare.h"
#include "report/html_report.h"
#include "report/run_data.h"
#include "report/summary.h"
#include "store/store.h"

namespace kp {

namespace {

using nlohmann::json;

po::options_description ReportOptions() {
  po::options_description desc(
      "kimi-plan report [RUN] [--compare RUN... --reference RUN [--steps 1,10,50,100] [--metric loss,grad_norm]]\n"
      "                 [--status STATE] [--csv FILE] [--predictions-csv FILE] [--json] [--html FILE] [--db PATH]\n\n"
      "Without RUN lists the runs (--status: only those that finished, failed, are running or ended without a word); with RUN summarises it; --compare prints each run's metrics at the chosen steps\n"
      "against the reference (`identical` when bitwise equal, else the % change). Options");
  desc.add_options()("help,h", "this text")
      ("run", po::value<std::string>(), "the run to summarise (also positional)")
      ("compare", po::value<std::vector<std::string>>()->multitoken(), "runs to compare (ids, space or comma separated)")
      ("reference", po::value<std::string>(), "the run --compare measures against")
      ("steps", po::value<std::string>(), "with --compare: steps, e.g. 1,10,50,100 (default: those the reference has, and its last)")
      ("metric", po::value<std::string>()->default_value("loss,grad_norm"), "with --compare: metrics (columns of the steps table)")
      ("status", po::value<std::string>(), "list only the runs that stand so: finished | failed | running | ended (killed without a word) | unknown")
      ("csv", po::value<std::string>(), "write the view as CSV to this file")
      ("predictions-csv", po::value<std::string>(), "write predicted against measured (with ratios) as CSV to this file")
      ("html", po::value<std::string>(), "write one self-contained HTML page with SVG plots to this file")
      ("plan", Int64Flag(1, INT64_MAX), "--html: the plan whose memory is drawn (default: the first shown run's, else the latest)")
      ("simulation", Int64Flag(1, INT64_MAX), "--html: the pipeline simulation whose Gantt chart is drawn (default: the latest)");
  AddOutputOptions(desc);
  return desc;
}

Result<std::int64_t> RunId(const std::string& text, const std::string& flag) {
  const bool digits = !text.empty() && text.size() <= 18 &&
                      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || std::stoll(text) == 0) return Status::InvalidArgument(flag + ": \"" + QuoteBounded(text) + "\" is not a run id");
  return std::stoll(text);
}

/// What the user asked for, validated before the store is opened.
struct ReportRequest {
  std::string db;
  std::optional<std::int64_t> run;
  std::vector<std::int64_t> compare;
  std::int64_t reference = 0;
  std::vector<int> steps;
  std::vector<std::string> metrics;
  std::optional<std::int64_t> plan, simulation;
  std::optional<std::string> status;  ///< a RunState to list
};

Result<std::vector<std::int64_t>> CompareIds(const std::vector<std::string>& values) {
  std::vector<std::int64_t> ids;
  for (const std::string& v : values) {
    std::string item;
    for (size_t i = 0; i <= v.size(); ++i) {
      if (i < v.size() && v[i] != ',') { item += v[i]; continue; }
      KP_ASSIGN_OR_RETURN(std::int64_t id, RunId(item, "--compare"));
      ids.push_back(id);
      item.clear();
    }
  }
  return ids;
}

Result<ReportRequest> Validate(const po::variables_map& vm) {
  ReportRequest q;
  q.db = vm["db"].as<std::string>();
  const bool comparing = vm.count("compare") > 0;
  if (comparing && !vm.count("reference")) return Status::InvalidArgument("--reference: required with --compare");
  if (!comparing && vm.count("reference")) return Status::InvalidArgument("--reference: only with --compare RUN...");
  if (!comparing && vm.count("steps")) return Status::InvalidArgument("--steps: only with --compare");
  if (comparing && vm.count("run")) return Status::InvalidArgument("--compare: give a run to summarise or --compare, not both");
  if (vm.count("run")) {
    KP_ASSIGN_OR_RETURN(q.run, RunId(vm["run"].as<std::string>(), "RUN"));
  }
  if (comparing) {
    KP_ASSIGN_OR_RETURN(q.compare, CompareIds(vm["compare"].as<std::vector<std::string>>()));
    KP_ASSIGN_OR_RETURN(q.reference, RunId(vm["reference"].as<std::string>(), "--reference"));
    if (vm.count("steps")) {
      KP_ASSIGN_OR_RETURN(q.steps, ParseSteps(vm["steps"].as<std::string>()));
    }
  }
  KP_ASSIGN_OR_RETURN(q.metrics, ParseMetrics(vm["metric"].as<std::string>()));
  if (vm.count("status")) {
    const std::string s = vm["status"].as<std::string>();
    const std::vector<std::string>& states = RunStates();
    if (std::find(states.begin(), states.end(), s) == states.end()) {
      std::string allowed;
      for (size_t i = 0; i < states.size(); ++i)
        allowed += (i == 0 ? "" : i + 1 == states.size() ? " or " : ", ") + states[i];
      return Status::InvalidArgument("--status: must be " + allowed + ", got \"" + s + "\"");
    }
    if (comparing || vm.count("run")) return Status::InvalidArgument("--status: only when listing runs (no RUN, no --compare)");
    q.status = s;
  }
  if (vm.count("plan")) q.plan = vm["plan"].as<std::int64_t>();
  if (vm.count("simulation")) q.simulation = vm["simulation"].as<std::int64_t>();
  return q;
}

/// The rendered outputs, all computed before anything is written.
struct ReportOutput {
  std::string text;
  json json_view;
  std::string csv;
  HtmlReportInput html;
};

std::vector<std::pair<std::int64_t, std::vector<PredictionRow>>> Predictions(
    const Store& store, const std::vector<RunData>& runs, const std::vector<SimulationRecord>& sims) {
  std::vector<std::pair<std::int64_t, std::vector<PredictionRow>>> out;
  for (const RunData& r : runs) {
    if (!r.plan_id) continue;
    Result<PlanRecord> plan = store.GetPlan(r.plan_id);
    // A configuration may name a plan of another store; it has no prediction here.
    if (!plan.ok()) continue;
    out.emplace_back(r.run.id, PredictedVsMeasured(PredictionsOf(*plan, sims), r));
  }
  return out;
}

json PredictionsByRunJson(const std::vector<std::pair<std::int64_t, std::vector<PredictionRow>>>& by_run) {
  json out = json::array();
  for (const auto& [run, rows] : by_run) out.push_back({{"run_id", run}, {"predictions", PredictionsJson(rows)}});
  return out;
}

// Every run, or those whose RunState is `status`.
Result<std::vector<RunData>> LoadAllRuns(const Store& store, const ProcessTable* processes,
                                         const std::optional<std::string>& status) {
  KP_ASSIGN_OR_RETURN(std::vector<RunRecord> records, store.ListRuns());
  std::vector<RunData> runs;
  for (const RunRecord& r : records) {
    // The state needs the record alone: a run filtered out has no steps read.
    if (status && RunState(r, ProcessOf(r, processes)) != *status) continue;
    KP_ASSIGN_OR_RETURN(RunData d, LoadRun(store, r.id, "RUN", processes));
    runs.push_back(std::move(d));
  }
  return runs;
}

Status ListView(const Store& store, const ProcessTable* processes, const std::vector<SimulationRecord>& sims,
                const std::optional<std::string>& status, ReportOutput* out) {
  KP_ASSIGN_OR_RETURN(std::vector<RunData> runs, LoadAllRuns(store, processes, status));
  KP_ASSIGN_OR_RETURN(std::vector<TableCount> tables, store.CountRows());
  std::vector<RunListEntry> list;
  for (const RunData& r : runs) list.push_back(ListEntry(r));
  const auto predictions = Predictions(store, runs, sims);
  out->text = RenderRunList(list, tables);
  if (!predictions.empty()) out->text += "\npredicted against measured\n" + RenderPredictions(predictions);
  out->json_view = RunListJson(list, tables);
  out->json_view["view"] = "list";
  out->json_view["predictions"] = PredictionsByRunJson(predictions);
  out->csv = RunListCsv(list);
  out->html.run_list = list;
  out->html.runs = std::move(runs);
  out->html.predictions = predictions;
  return Status::Ok();
}

Status RunView(const Store& store, const ProcessTable* processes, const std::vector<SimulationRecord>& sims,
               std::int64_t id, ReportOutput* out) {
  KP_ASSIGN_OR_RETURN(RunData run, LoadRun(store, id, "RUN", processes));
  std::optional<PlanPredictions> plan;
  if (run.plan_id) {
    Result<PlanRecord> rec = store.GetPlan(run.plan_id);
    if (rec.ok()) plan = PredictionsOf(*rec, sims);
  }
  const RunSummary s = Summarise(run, plan);
  out->text = RenderSummary(s);
  out->json_view = SummaryJson(s);
  out->json_view["view"] = "run";
  out->csv = StepsCsv(run);
  out->html.run_list = {s.entry};
  if (!s.predictions.empty()) out->html.predictions = {{run.run.id, s.predictions}};
  out->html.runs = {std::move(run)};
  return Status::Ok();
}

Status CompareView(const Store& store, const ProcessTable* processes, const std::vector<SimulationRecord>& sims,
                   const ReportRequest& q, ReportOutput* out) {
  KP_ASSIGN_OR_RETURN(RunData reference, LoadRun(store, q.reference, "--reference", processes));
  std::vector<RunData> runs;
  for (std::int64_t id : q.compare) {
    KP_ASSIGN_OR_RETURN(RunData r, LoadRun(store, id, "--compare", processes));
    runs.push_back(std::move(r));
  }
  KP_ASSIGN_OR_RETURN(Comparison c, Compare(reference, runs, q.metrics, q.steps));
  runs.insert(runs.begin(), std::move(reference));
  const auto predictions = Predictions(store, runs, sims);
  out->text = RenderComparison(c);
  if (!predictions.empty()) out->text += "\npredicted against measured\n" + RenderPredictions(predictions);
  out->json_view = {{"view", "compare"}, {"comparison", ComparisonJson(c)}, {"predictions", PredictionsByRunJson(predictions)}};
  out->csv = ComparisonCsv(c);
  for (const RunData& r : runs) out->html.run_list.push_back(ListEntry(r));
  out->html.runs = std::move(runs);
  out->html.comparison = std::move(c);
  out->html.predictions = predictions;
  return Status::Ok();
}

bool HasMemory(const PlanRecord& p) { return MemoryBars(p).ok() && !MemoryBars(p)->empty(); }

// The plan drawn: --plan, else the first shown run's, else the latest with a
// memory breakdown.
Status PickPlan(const Store& store, const ReportRequest& q, HtmlReportInput* html) {
  std::int64_t id = q.plan.value_or(0);
  for (const RunData& r : html->runs)
    if (!id && r.plan_id && store.GetPlan(r.plan_id).ok()) id = r.plan_id;
  if (id) {
    KP_ASSIGN_OR_RETURN(html->plan, store.GetPlan(id));
    return Status::Ok();
  }
  KP_ASSIGN_OR_RETURN(std::vector<PlanRecord> plans, store.ListPlans());
  for (auto it = plans.rbegin(); it != plans.rend(); ++it)
    if (HasMemory(*it)) {
      html->plan = *it;
      break;
    }
  return Status::Ok();
}

bool Redrawable(const SimulationRecord& s) { return s.kind == "pipeline" && PipelineGantt(s).ok(); }

Status PickSimulations(const ReportRequest& q, const std::vector<SimulationRecord>& sims, HtmlReportInput* html) {
  for (const SimulationRecord& s : sims)
    if (s.kind == "sync") html->syncs.push_back(s);
  if (q.simulation) {
    const auto it = std::find_if(sims.begin(), sims.end(), [&](const SimulationRecord& s) { return s.id == *q.simulation; });
    if (it == sims.end()) return Status::NotFound("--simulation: no simulation with id " + std::to_string(*q.simulation));
    if (it->kind != "pipeline")
      return Status::InvalidArgument("--simulation: simulation " + std::to_string(it->id) + " is a " + it->kind +
                                     " simulation, not a pipeline");
    html->pipeline = *it;
    return Status::Ok();
  }
  for (auto it = sims.rbegin(); it != sims.rend(); ++it)
    if (Redrawable(*it)) {
      html->pipeline = *it;
      break;
    }
  return Status::Ok();
}

Result<ReportOutput> BuildReport(const ReportRequest& q, const CliEnv& env) {
  // Read-only: a missing file is refused (a report of nothing is a
  // mistake), and a read-only file works.
  KP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(q.db, env.clock, StoreMode::kRead));
  KP_ASSIGN_OR_RETURN(std::vector<SimulationRecord> sims, store->ListSimulations());
  ReportOutput out;
  const ProcessTable* processes = env.process_table;
  if (!q.compare.empty()) KP_RETURN_IF_ERROR(CompareView(*store, processes, sims, q, &out));
  else if (q.run) KP_RETURN_IF_ERROR(RunView(*store, processes, sims, *q.run, &out));
  else KP_RETURN_IF_ERROR(ListView(*store, processes, sims, q.status, &out));
  out.json_view["schema"] = "kimi-plan.report/1";
  out.html.title = "kimi-plan report: " + q.db;
  KP_RETURN_IF_ERROR(PickPlan(*store, q, &out.html));
  KP_RETURN_IF_ERROR(PickSimulations(q, sims, &out.html));
  return out;
}

}  // namespace

Status ReportCommand(const std::vector<std::string>& args, CliEnv& env) {
  const po::options_description desc = ReportOptions();
  po::variables_map vm;
  po::positional_options_description positional;
  positional.add("run", 1);
  KP_ASSIGN_OR_RETURN(const bool proceed, ParseCommand(args, desc, &vm, env.out, &positional));
  if (!proceed) return Status::Ok();
  KP_ASSIGN_OR_RETURN(ReportRequest q, Validate(vm));
  KP_RETURN_IF_ERROR(CheckOutputFile(vm, env, "csv", /*create_parent=*/true));
  KP_RETURN_IF_ERROR(CheckOutputFile(vm, env, "predictions-csv", /*create_parent=*/true));
  KP_RETURN_IF_ERROR(CheckOutputFile(vm, env, "html", /*create_parent=*/true));
  KP_RETURN_IF_ERROR(CheckDistinctPaths(vm, env, {"db", "csv", "predictions-csv", "html"}));
  KP_ASSIGN_OR_RETURN(ReportOutput out, BuildReport(q, env));
  std::string html;
  if (vm.count("html")) {
    KP_ASSIGN_OR_RETURN(html, HtmlReport(out.html));
  }
  if (vm.count("csv")) KP_RETURN_IF_ERROR(env.fs.WriteFile(vm["csv"].as<std::string>(), out.csv));
  if (vm.count("predictions-csv"))
    KP_RETURN_IF_ERROR(env.fs.WriteFile(vm["predictions-csv"].as<std::string>(), PredictionsCsv(out.html.predictions)));
  if (vm.count("html")) KP_RETURN_IF_ERROR(env.fs.WriteFile(vm["html"].as<std::string>(), html));
  if (vm.count("json")) env.out << out.json_view.dump(2) << "\n";
  else env.out << out.text;
  return Status::Ok();
}

}  // namespace kp
