#include "ingest/ingest.h"

#include <nlohmann/json.hpp>

namespace kp {

namespace {

using json = nlohmann::json;

std::int64_t PlanOfRun(const RunRecord& run) {
  const json c = json::parse(run.config_json, nullptr, false);
  return c.is_object() && c.contains("plan_id") && c["plan_id"].is_number_integer() ? c["plan_id"].get<std::int64_t>()
                                                                                     : 0;
}

}  // namespace

Status CheckIngestTarget(const Store& store, const IngestTarget& t) {
  if (t.plan_id > 0) {
    Result<PlanRecord> plan = store.GetPlan(t.plan_id);
    if (!plan.ok())
      return Status::InvalidArgument(t.plan_flag + ": no plan with id " + std::to_string(t.plan_id) + " in the store");
  }
  KP_ASSIGN_OR_RETURN(const std::int64_t existing, store.FindRunBySource(t.source));
  if (existing == 0) return Status::Ok();
  KP_ASSIGN_OR_RETURN(const RunRecord run, store.GetRun(existing));
  const std::int64_t recorded = PlanOfRun(run);
  if (t.plan_id > 0 && recorded != t.plan_id)
    return Status::InvalidArgument(t.plan_flag + ": " + t.source + " was ingested as run " + std::to_string(existing) +
                                   (recorded > 0 ? " with plan " + std::to_string(recorded) : " with no plan") +
                                   ", not plan " + std::to_string(t.plan_id));
  return Status::Ok();
}

Result<ChunkResult> IngestChunk(Store& store, const IngestTarget& t, const std::vector<MetricRecord>& metrics) {
  ChunkResult r;
  KP_RETURN_IF_ERROR(store.InTransaction([&]() -> Status {
    KP_ASSIGN_OR_RETURN(r.run_id, store.FindRunBySource(t.source));
    if (r.run_id == 0) {
      RunRecord run;
      run.kind = "verl";
      run.model = "unknown";
      if (t.plan_id > 0) {
        KP_ASSIGN_OR_RETURN(const PlanRecord plan, store.GetPlan(t.plan_id));
        run.model = plan.model;
      }
      json config = {{"engine", "verl"}, {"source", t.source}};
      if (t.plan_id > 0) config["plan_id"] = t.plan_id;
      if (!t.label.empty()) config["label"] = t.label;
      run.config_json = config.dump();
      run.source = t.source;
      KP_ASSIGN_OR_RETURN(r.run_id, store.CreateRun(run));
      r.created = true;
    }
    KP_ASSIGN_OR_RETURN(r.rows_written, store.UpsertMetrics(r.run_id, metrics));
    return Status::Ok();
  }));
  return r;
}

Result<std::string> EndIngestedRun(Store& store, std::int64_t run_id, std::optional<int> exit_code) {
  KP_ASSIGN_OR_RETURN(const RunRecord run, store.GetRun(run_id));
  if (run.status != "running" || !exit_code) return run.status;
  const Status outcome = *exit_code == 0 ? Status::Ok()
                                         : Status::Internal("Verl's trainer exited with code " +
                                                            std::to_string(*exit_code));
  KP_RETURN_IF_ERROR(store.EndRun(run_id, outcome));
  return std::string(outcome.ok() ? "finished" : "failed");
}

}  // namespace kp
