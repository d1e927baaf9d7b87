// `kimi-plan ingest`'s writes: a metrics file of another engine (Verl) made
// one run of the store, linked to the plan it was launched from, its
// metrics under their own names, its status from the job file.
//
// Invariants: a file is one run (runs.source, the file's canonical path);
// writing the same lines again changes nothing; each IngestChunk is one
// transaction, so a failure leaves the store as it was.
// Thread-safety: as the Store it is given.
#ifndef KIMI_PLAN_INGEST_INGEST_H_
#define KIMI_PLAN_INGEST_INGEST_H_

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "ingest/metrics_file.h"
#include "store/store.h"

namespace kp {

/// The run an ingest writes to.
struct IngestTarget {
  std::string source;        ///< the metrics file, canonical
  std::int64_t plan_id = 0;  ///< --plan, else the job file's; 0: none
  std::string plan_flag;     ///< where plan_id came from, for errors: "--plan" or the job file's path
  std::string label;         ///< the job's label, when a job file gave one
};

/// Checks, writing nothing, that `target`'s plan exists and that a run
/// already ingested from the same file names the same plan:
/// InvalidArgument "--plan: no plan with id N" / "--plan: FILE was
/// ingested as run R with plan P".
Status CheckIngestTarget(const Store& store, const IngestTarget& target);

/// What one IngestChunk did.
struct ChunkResult {
  std::int64_t run_id = 0;
  bool created = false;  ///< the run did not exist before
  int rows_written = 0;  ///< metric rows added or changed
};

/// In one transaction: finds the run of target.source, or creates it (kind
/// "verl", the plan's model, config_json {"engine", "source", "plan_id",
/// "label"}, status running), and writes `metrics` (Store::UpsertMetrics).
Result<ChunkResult> IngestChunk(Store& store, const IngestTarget& target, const std::vector<MetricRecord>& metrics);

/// Ends run `run_id` as the job file says: finished for exit code 0,
/// failed ("Verl's trainer exited with code N") otherwise; nothing when the
/// run has already ended or the job has not. Returns the run's status.
Result<std::string> EndIngestedRun(Store& store, std::int64_t run_id, std::optional<int> exit_code);

}  // namespace kp

#endif  // KIMI_PLAN_INGEST_INGEST_H_
