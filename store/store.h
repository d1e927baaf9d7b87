// The run store: one SQLite file (default kimi-plan.db in the working
// directory) that every command writes its inputs and outputs to, and that
// `kimi-plan report` reads. The schema is versioned with PRAGMA
// user_version and brought up to date by ordered migrations on open; it is
// documented in docs/schema.md.
//
// Invariants: every write happens inside one transaction, so a failed
// command leaves no partial record. The database runs in WAL mode so a
// reader never blocks the writer.
// Thread-safety: a Store is used from one thread; open one per thread.
#ifndef KIMI_PLAN_STORE_STORE_H_
#define KIMI_PLAN_STORE_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

struct sqlite3;

namespace kp {

/// A recorded `kimi-plan plan`.
struct PlanRecord {
  std::int64_t id = 0;
  std::string created_at;
  std::string model;
  std::string gpu;
  int world = 0;
  std::string preset;        ///< empty unless --preset was used
  bool feasible = false;
  double step_time_s = 0;
  std::string request_json;  ///< the full input, enough to re-run it
  std::string result_json;   ///< the `--json` output
  std::string layer_split = "even";  ///< the stage split's rule: even, megatron or the counts
  std::string layer_counts;  ///< decoder layers per stage, "2,2,2"; empty when no plan was evaluated
};

/// A calibration table `kimi-plan calibrate` measured (specs/calibration.h).
struct CalibrationRecord {
  std::int64_t id = 0;
  std::string created_at;
  std::string gpu;
  std::string path;        ///< the preset file it was written to
  std::string table_json;  ///< the table, in the file's format
};

/// A recorded `kimi-plan simulate` run of any kind.
struct SimulationRecord {
  std::int64_t id = 0;
  std::string created_at;
  std::string kind;            ///< "pipeline", "attnres", "sync" or "loop"
  std::int64_t plan_id = 0;    ///< the plan it took its costs from; 0 when none
  std::string request_json;
  std::string result_json;
};

/// A recorded run of the runtime (`kimi-plan train`, or `kimi-plan run`
/// with kind "run"): what ran, with its full
/// configuration.
struct RunRecord {
  std::int64_t id = 0;
  std::string created_at;
  std::string kind;         ///< "train" or "run"
  std::string model;        ///< the model's name
  std::string config_json;  ///< the full configuration, enough to re-run it
  /// "running" from CreateRun until EndRun says "finished" or "failed";
  /// empty for runs recorded before schema 8. A run still "running" whose
  /// process is gone was killed without a word.
  std::string status;
  std::string error;     ///< a failed run's one-line error
  std::string ended_at;  ///< when EndRun was called, ISO 8601
  std::string host;      ///< the host of the process that records the run
  std::int64_t pid = 0;  ///< and its process id
  /// The metrics file an ingested run was read from (`kimi-plan ingest`,
  /// an absolute path; one run per file); empty for runs this program ran.
  std::string source;
};

/// One metric of one step of an ingested run, under the engine's own name
/// ("timing_s/step", "perf/throughput").
struct MetricRecord {
  int step = 0;  ///< the engine's step, >= 0 (Verl logs its validation before training as step 0)
  std::string name;
  double value = 0;
};

/// One optimizer step of a run.
struct StepRecord {
  std::int64_t run_id = 0;
  int step = 0;             ///< 1-based optimizer step count after the step
  double loss = 0;          ///< nats per token
  double grad_norm = 0;     ///< before clipping
  double lr = 0;
  double tokens_per_s = 0;
  double step_time_s = 0;
  double peak_memory_bytes = 0;
  std::string created_at;
};

/// Every column of a run's steps other than the key and timestamps, read by
/// name, so that a reader keeps working when a migration adds a metric (an
/// optional `reward`, say). `values[c][i]` is column `names[c]` at
/// `steps[i]`; SQL NULL reads as nullopt.
struct StepColumns {
  std::vector<int> steps;  ///< ascending
  std::vector<std::string> names;
  std::vector<std::vector<std::optional<double>>> values;
};

/// One table of the store and its row count.
struct TableCount {
  std::string table;
  std::int64_t rows = 0;
};

/// Pipeline traffic of one step of a distributed run: the AttnRes block
/// entries and bytes sent by one stage in one direction.
struct TrafficRecord {
  std::int64_t run_id = 0;
  int step = 0;
  int stage = 0;
  std::string direction;  ///< "forward" or "backward"
  std::int64_t entries = 0;
  std::int64_t bytes = 0;
};

/// One step of the SDPO loop (`kimi-plan sdpo`) beyond its `steps` row.
struct LoopStepRecord {
  int step = 0;
  std::int64_t weight_version = 0;    ///< optimizer steps behind the weights the rollout sampled with
  double reward_mean = 0;             ///< mean verifier reward of the step's responses
  std::optional<double> distill_loss; ///< the SDPO or k1 distillation loss; empty when the mode has none
  std::optional<double> pg_loss;      ///< the GRPO policy-gradient loss; empty when the mode has none
  double response_tokens_mean = 0;    ///< tokens per response, the stop token included
  std::int64_t generated_tokens = 0;
  double generation_s = 0;            ///< the rollout's sampling time for the batch
  double generation_tokens_per_s = 0;
  double feedback_s = 0;              ///< the verifier and the teacher's contexts
  double teacher_s = 0;               ///< the self-teacher's scoring forward
  double train_s = 0;                 ///< student forward, backward and optimizer
  double wait_s = 0;                  ///< the trainer waiting for the batch
  double sync_s = 0;                  ///< the weight sync after the step (0 when none)
  std::int64_t sync_bytes = 0;
};

/// One weight sync from the trainer to the rollout ranks.
struct WeightSyncRecord {
  std::int64_t version = 0;  ///< optimizer steps behind the weights sent
  std::string mode;          ///< "full" or "lora"
  std::int64_t bytes = 0;
  int buckets = 0;
  double seconds = 0;
};

/// How a command uses the store.
enum class StoreMode {
  kWrite,  ///< creates a missing file, migrates, writes
  kRead,   ///< only reads (PRAGMA query_only; immutable where nothing can be written), so a
           ///< read-only file or mount works and no -wal/-shm file is left beside it
};

class Store {
 public:
  /// The schema version this build writes; older files are migrated up.
  static constexpr int kSchemaVersion = 9;
  /// PRAGMA application_id of a kimi-plan store ("KPLN"): a file with
  /// another id is another program's and is refused before anything is read
  /// or written (docs/schema.md).
  static constexpr int kApplicationId = 0x4b504c4e;
  /// How long a write waits for another process's write lock before it
  /// fails with "--db: PATH: locked by another writer for more than 5 s".
  static constexpr int kBusyTimeoutMs = 5000;

  /// Opens the database at `path` for `mode`. kWrite creates a missing file
  /// (its directory must exist) and migrates it, building it beside the path
  /// and linking it into place whole, so a concurrent reader sees either no
  /// file or a complete store, and of two concurrent creators one store
  /// wins and both write to it; kRead opens an existing
  /// file read-only (a file older than this build is migrated first when it
  /// is writable). ":memory:" gives a private in-memory store for tests.
  ///
  /// Every refusal is InvalidArgument (exit 2), one line
  /// "--db: PATH: what is wrong", and leaves the file byte-identical (or not
  /// created): an empty path, a missing directory, a directory, not a regular
  /// file, not a SQLite database (wrong header, or truncated: shorter than
  /// its header says, or failing PRAGMA quick_check), a read-only file for
  /// kWrite, a schema newer than this build, a lock held longer than
  /// kBusyTimeoutMs. kRead on a missing file is NotFound.
  static Result<std::unique_ptr<Store>> Open(const std::string& path, const Clock& clock,
                                             StoreMode mode = StoreMode::kWrite);
  /// The checks Open makes before SQLite opens the file (the path, its
  /// directory, the file's kind, permissions and header), without opening
  /// or creating anything: a command about to do long work calls it first so
  /// that a bad --db is refused before, not after.
  static Status CheckPath(const std::string& path, StoreMode mode = StoreMode::kWrite);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  int SchemaVersion() const;

  /// Inserts `plan` (id and created_at are assigned) and returns its id.
  Result<std::int64_t> InsertPlan(const PlanRecord& plan);
  Result<PlanRecord> GetPlan(std::int64_t id) const;
  Result<std::vector<PlanRecord>> ListPlans() const;

  /// Inserts a simulation (id and created_at assigned) and returns its id.
  Result<std::int64_t> InsertSimulation(const SimulationRecord& sim);
  Result<std::vector<SimulationRecord>> ListSimulations() const;

  /// Inserts a calibration table (id and created_at assigned), returns its id.
  Result<std::int64_t> InsertCalibration(const CalibrationRecord& calibration);
  Result<std::vector<CalibrationRecord>> ListCalibrations() const;

  /// Inserts `run` (id and created_at are assigned, status "running"; its
  /// host and pid are kept) and returns its id.
  Result<std::int64_t> CreateRun(const RunRecord& run);
  /// Records how run `id` ended: "finished" when `outcome` is ok, else
  /// "failed" with its message. NotFound for no such run; a run that has
  /// already ended keeps its first ending (Internal: a caller ends a run once).
  Status EndRun(std::int64_t id, const Status& outcome);
  /// Marks every run still "running" that the process `pid` of `host`
  /// records as "failed" with `outcome`'s message (a launcher's ranks
  /// stopped before rank 0 could say so); returns how many.
  Result<int> EndRunsOfProcess(const std::string& host, std::int64_t pid, const Status& outcome);
  /// Appends one step of a run in its own committed transaction, so a run
  /// killed later keeps every step logged so far. (run_id, step) is unique.
  Status AppendStep(const StepRecord& step);
  Result<RunRecord> GetRun(std::int64_t id) const;
  /// The run's steps in step order.
  Result<std::vector<StepRecord>> ListSteps(std::int64_t run_id) const;
  /// Every run in id order.
  Result<std::vector<RunRecord>> ListRuns() const;
  /// The run's steps column by column (numeric columns only; run_id, step
  /// and created_at are left out), in step order.
  Result<StepColumns> ListStepColumns(std::int64_t run_id) const;
  /// The id of the run ingested from `source` (RunRecord::source), 0 when none.
  Result<std::int64_t> FindRunBySource(const std::string& source) const;
  /// Writes the metrics of an ingested run in one transaction: a new
  /// (step, name) is added, an existing one with another value replaced
  /// (the engine rewrote that step), an equal one left alone. Returns the
  /// rows added or replaced, so that writing the same metrics twice
  /// returns 0.
  Result<int> UpsertMetrics(std::int64_t run_id, const std::vector<MetricRecord>& metrics);
  /// The run's metrics as columns, one per name in name order, over every
  /// step any of them has (a name missing at a step reads nullopt).
  Result<StepColumns> ListMetricColumns(std::int64_t run_id) const;
  /// Row counts of every table the schema has, in name order: tables added
  /// by later migrations show up without a change here.
  Result<std::vector<TableCount>> CountRows() const;
  /// Appends an SDPO step: its `steps` row, its `loop_steps` row and the
  /// syncs made after it, in one transaction.
  Status AppendLoopStep(const StepRecord& step, const LoopStepRecord& loop,
                        const std::vector<WeightSyncRecord>& syncs);
  /// The run's loop steps in step order.
  Result<std::vector<LoopStepRecord>> ListLoopSteps(std::int64_t run_id) const;
  /// Appends a step's traffic rows in one transaction ((run_id, step, stage,
  /// direction) is unique); nothing for an empty list.
  Status AppendTraffic(const std::vector<TrafficRecord>& rows);
  /// The run's traffic by step, stage, then forward before backward.
  Result<std::vector<TrafficRecord>> ListTraffic(std::int64_t run_id) const;

  /// Runs `body` in one transaction: committed if it returns Ok, rolled
  /// back otherwise. Nested (a body that calls InsertPlan, say), the inner
  /// one is a savepoint, committed only with the outer.
  Status InTransaction(const std::function<Status()>& body);

 private:
  Store(sqlite3* db, const Clock& clock, std::string path) : db_(db), clock_(clock), path_(std::move(path)) {}
  static Result<std::unique_ptr<Store>> OpenChecked(const std::string& path, const Clock& clock, StoreMode mode);
  // Refuses a file that is not a kimi-plan store at `version`: another
  // program's database, or one whose tables differ from what this build's
  // migrations make (a dropped table, a hand-set version).
  Status CheckIdentity(int version);
  // PRAGMA `name`'s integer value; a failure as SqlError reports it.
  Result<int> PragmaInt(const char* name) const;
  // OpenChecked without making a missing file whole first: SQLite creates it in place.
  static Result<std::unique_ptr<Store>> OpenInPlace(const std::string& path, const Clock& clock, StoreMode mode);
  // Builds a new store beside `path` and links it into place (Open's contract).
  static Status CreateWhole(const std::string& path, const Clock& clock);
  Status Exec(const std::string& sql);
  /// The one-line "--db: PATH: ..." status of a failed SQLite call `what`.
  Status SqlError(int rc, const std::string& what) const;
  Status Migrate();
  Status InsertStepRow(const StepRecord& r);  // inside a transaction
  sqlite3* db_;
  const Clock& clock_;
  std::string path_;
};

}  // namespace kp

#endif  // KIMI_PLAN_STORE_STORE_H_
