#include "store/store.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include <sqlite3.h>

namespace kp {

namespace {

// Migration i takes the schema from version i to i + 1. Append only: a
// released migration is never edited, since files in the field ran it.
const char* const kMigrations[] = {
    // 0 -> 1: recorded plans.
    R"sql(
    CREATE TABLE plans (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      created_at TEXT NOT NULL,
      model TEXT NOT NULL,
      gpu TEXT NOT NULL,
      world INTEGER NOT NULL CHECK (world > 0),
      preset TEXT,
      feasible INTEGER NOT NULL CHECK (feasible IN (0, 1)),
      step_time_s REAL NOT NULL,
      request_json TEXT NOT NULL,
      result_json TEXT NOT NULL
    );
    )sql",
    // 1 -> 2: recorded simulations, optionally tied to the plan they priced.
    R"sql(
    CREATE TABLE simulations (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      created_at TEXT NOT NULL,
      kind TEXT NOT NULL CHECK (kind IN ('pipeline', 'attnres', 'sync', 'loop')),
      plan_id INTEGER REFERENCES plans(id),
      request_json TEXT NOT NULL,
      result_json TEXT NOT NULL
    );
    CREATE INDEX simulations_by_plan ON simulations(plan_id);
    )sql",
    // 2 -> 3: runtime runs and their per-step log.
    R"sql(
    CREATE TABLE runs (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      created_at TEXT NOT NULL,
      kind TEXT NOT NULL,
      model TEXT NOT NULL,
      config_json TEXT NOT NULL
    );
    CREATE TABLE steps (
      run_id INTEGER NOT NULL REFERENCES runs(id),
      step INTEGER NOT NULL CHECK (step > 0),
      loss REAL NOT NULL,
      grad_norm REAL NOT NULL,
      lr REAL NOT NULL,
      tokens_per_s REAL NOT NULL,
      step_time_s REAL NOT NULL,
      peak_memory_bytes REAL NOT NULL,
      created_at TEXT NOT NULL,
      PRIMARY KEY (run_id, step)
    );
    )sql",
    // 3 -> 4: per step, pipeline stage and direction, the AttnRes block
    // entries and bytes a distributed run sent (`kimi-plan run`).
    R"sql(
    CREATE TABLE pipeline_traffic (
      run_id INTEGER NOT NULL REFERENCES runs(id),
      step INTEGER NOT NULL CHECK (step > 0),
      stage INTEGER NOT NULL CHECK (stage >= 0),
      direction TEXT NOT NULL CHECK (direction IN ('forward', 'backward')),
      entries INTEGER NOT NULL CHECK (entries >= 0),
      bytes INTEGER NOT NULL CHECK (bytes >= 0),
      PRIMARY KEY (run_id, step, stage, direction)
    );
    )sql",
    // 4 -> 5: the SDPO loop (`kimi-plan sdpo`): per step the rollout, feedback,
    // teacher and sync metrics beside the step's `steps` row, and every
    // weight sync to the rollout ranks.
    R"sql(
    CREATE TABLE loop_steps (
      run_id INTEGER NOT NULL REFERENCES runs(id),
      step INTEGER NOT NULL CHECK (step > 0),
      weight_version INTEGER NOT NULL CHECK (weight_version >= 0),
      reward_mean REAL NOT NULL,
      distill_loss REAL,
      pg_loss REAL,
      response_tokens_mean REAL NOT NULL,
      generated_tokens INTEGER NOT NULL CHECK (generated_tokens >= 0),
      generation_s REAL NOT NULL,
      generation_tokens_per_s REAL NOT NULL,
      feedback_s REAL NOT NULL,
      teacher_s REAL NOT NULL,
      train_s REAL NOT NULL,
      wait_s REAL NOT NULL,
      sync_s REAL NOT NULL,
      sync_bytes INTEGER NOT NULL CHECK (sync_bytes >= 0),
      PRIMARY KEY (run_id, step)
    );
    CREATE TABLE weight_syncs (
      run_id INTEGER NOT NULL REFERENCES runs(id),
      version INTEGER NOT NULL CHECK (version >= 0),
      mode TEXT NOT NULL CHECK (mode IN ('full', 'lora')),
      bytes INTEGER NOT NULL CHECK (bytes >= 0),
      buckets INTEGER NOT NULL CHECK (buckets >= 0),
      seconds REAL NOT NULL,
      PRIMARY KEY (run_id, version)
    );
    )sql",
    // 5 -> 6: the stage split a plan was sized with (`--layer-split`);
    // plans recorded before it used the even split.
    R"sql(
    ALTER TABLE plans ADD COLUMN layer_split TEXT NOT NULL DEFAULT 'even';
    ALTER TABLE plans ADD COLUMN layer_counts TEXT;
    )sql",
    // 6 -> 7: the calibration tables `kimi-plan calibrate` measured.
    R"sql(
    CREATE TABLE calibrations (
      id INTEGER PRIMARY KEY,
      created_at TEXT NOT NULL,
      gpu TEXT NOT NULL,
      path TEXT NOT NULL,
      table_json TEXT NOT NULL
    );
    )sql",
    // 7 -> 8: how a run ended, and the process that records it, so that a
    // run killed without a word (still 'running', its process gone) shows
    // as such; runs recorded before keep a NULL status.
    R"sql(
    ALTER TABLE runs ADD COLUMN status TEXT CHECK (status IN ('running', 'finished', 'failed'));
    ALTER TABLE runs ADD COLUMN error TEXT;
    ALTER TABLE runs ADD COLUMN ended_at TEXT;
    ALTER TABLE runs ADD COLUMN host TEXT;
    ALTER TABLE runs ADD COLUMN pid INTEGER;
    )sql",
    // 8 -> 9: runs of another engine read from the metrics file it wrote
    // (`kimi-plan ingest`): the file, one run per file, and every step's
    // metrics by the engine's own names.
    R"sql(
    ALTER TABLE runs ADD COLUMN source TEXT;
    CREATE UNIQUE INDEX runs_by_source ON runs(source) WHERE source IS NOT NULL;
    CREATE TABLE metrics (
      run_id INTEGER NOT NULL REFERENCES runs(id),
      step INTEGER NOT NULL CHECK (step >= 0),
      name TEXT NOT NULL,
      value REAL NOT NULL,
      PRIMARY KEY (run_id, step, name)
    ) WITHOUT ROWID;
    )sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == Store::kSchemaVersion);

// A prepared statement that finalizes itself.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Status status() const {
    if (rc_ == SQLITE_OK) return Status::Ok();
    return Status::IoError(std::string("sqlite prepare: ") + sqlite3_errmsg(db_));
  }
  void Bind(int i, const std::string& s) { sqlite3_bind_text(stmt_, i, s.c_str(), -1, SQLITE_TRANSIENT); }
  void Bind(int i, std::int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void Bind(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  // Ready for the next row's bindings.
  void Reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  void Bind(int i, const std::optional<double>& v) {
    if (v) Bind(i, *v);
    else sqlite3_bind_null(stmt_, i);
  }
  void BindNullable(int i, const std::string& s) {
    if (s.empty()) sqlite3_bind_null(stmt_, i);
    else Bind(i, s);
  }
  int Step() { return sqlite3_step(stmt_); }
  std::string Text(int col) const {
    const unsigned char* t = sqlite3_column_text(stmt_, col);
    return t ? reinterpret_cast<const char*>(t) : "";
  }
  std::int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  double Real(int col) const { return sqlite3_column_double(stmt_, col); }
  bool IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  int Columns() const { return sqlite3_column_count(stmt_); }
  std::string Name(int col) const { return sqlite3_column_name(stmt_, col); }
  Status Error(const char* what) const {
    return Status::IoError(std::string("sqlite ") + what + ": " + sqlite3_errmsg(db_));
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
};

constexpr const char* kPlanColumns =
    "id, created_at, model, gpu, world, preset, feasible, step_time_s, request_json, result_json, layer_split, "
    "layer_counts";

PlanRecord ReadPlan(const Statement& st) {
  PlanRecord p;
  p.id = st.Int(0);
  p.created_at = st.Text(1);
  p.model = st.Text(2);
  p.gpu = st.Text(3);
  p.world = static_cast<int>(st.Int(4));
  p.preset = st.Text(5);
  p.feasible = st.Int(6) != 0;
  p.step_time_s = st.Real(7);
  p.request_json = st.Text(8);
  p.result_json = st.Text(9);
  p.layer_split = st.Text(10);
  p.layer_counts = st.Text(11);
  return p;
}

constexpr const char* kRunColumns =
    "id, created_at, kind, model, config_json, status, error, ended_at, host, pid, source";
constexpr const char* kStepColumns =
    "run_id, step, loss, grad_norm, lr, tokens_per_s, step_time_s, peak_memory_bytes, created_at";

RunRecord ReadRun(const Statement& st) {
  RunRecord r;
  r.id = st.Int(0);
  r.created_at = st.Text(1);
  r.kind = st.Text(2);
  r.model = st.Text(3);
  r.config_json = st.Text(4);
  r.status = st.Text(5);
  r.error = st.Text(6);
  r.ended_at = st.Text(7);
  r.host = st.Text(8);
  r.pid = st.Int(9);
  r.source = st.Text(10);
  return r;
}

StepRecord ReadStep(const Statement& st) {
  StepRecord s;
  s.run_id = st.Int(0);
  s.step = static_cast<int>(st.Int(1));
  s.loss = st.Real(2);
  s.grad_norm = st.Real(3);
  s.lr = st.Real(4);
  s.tokens_per_s = st.Real(5);
  s.step_time_s = st.Real(6);
  s.peak_memory_bytes = st.Real(7);
  s.created_at = st.Text(8);
  return s;
}

}  // namespace

namespace {

std::string DbError(const std::string& path, const std::string& what) { return "--db: " + path + ": " + what; }

std::uint32_t BigEndian(const unsigned char* p, int n) {
  std::uint32_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

// What can be known about the file before SQLite opens it, so that a bad
// --db is refused with its reason and without a byte written: SQLite itself
// would create a file in place of a missing one, and only fail (or write a
// journal) on the first statement for a file that is not a database.
// Sets `*existing` when the file exists and is not empty.
Status CheckDbFile(const std::string& path, StoreMode mode, bool* existing) {
  namespace fs = std::filesystem;
  *existing = false;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) parent = ".";
  if (st.type() == fs::file_type::not_found) {
    if (mode == StoreMode::kRead) return Status::NotFound("--db: " + path + " does not exist (nothing recorded yet?)");
    if (!fs::is_directory(parent, ec))
      return Status::InvalidArgument(DbError(path, "directory " + parent.string() + " does not exist"));
    if (::access(parent.c_str(), W_OK) != 0)
      return Status::InvalidArgument(DbError(path, "directory " + parent.string() + " is not writable"));
    return Status::Ok();
  }
  if (ec) return Status::InvalidArgument(DbError(path, ec.message()));
  if (fs::is_directory(st)) return Status::InvalidArgument(DbError(path, "is a directory, not a database file"));
  if (!fs::is_regular_file(st)) return Status::InvalidArgument(DbError(path, "is not a regular file"));
  if (mode == StoreMode::kWrite) {
    // Mode bits as well as access(): root may write a 0444 file, but the
    // user who made it read-only meant it.
    const bool any_write = (st.permissions() & (fs::perms::owner_write | fs::perms::group_write |
                                                fs::perms::others_write)) != fs::perms::none;
    if (!any_write || ::access(path.c_str(), W_OK) != 0)
      return Status::InvalidArgument(DbError(path, "read-only file, and this command writes to the store"));
    if (::access(parent.c_str(), W_OK) != 0)
      return Status::InvalidArgument(
          DbError(path, "directory " + parent.string() + " is not writable (SQLite writes its journal there)"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::InvalidArgument(DbError(path, "cannot be read"));
  unsigned char header[100] = {};
  in.read(reinterpret_cast<char*>(header), sizeof header);
  const std::size_t got = static_cast<std::size_t>(in.gcount());
  if (got == 0) return Status::Ok();  // an empty file is an empty database
  static const char kMagic[] = "SQLite format 3";  // and its NUL: 16 bytes
  if (got < 16 || std::memcmp(header, kMagic, 16) != 0)
    return Status::InvalidArgument(DbError(path, "not a SQLite database (no SQLite header)"));
  if (got < sizeof header)
    return Status::InvalidArgument(DbError(path, "not a SQLite database (truncated: " + std::to_string(got) +
                                                     " bytes, shorter than the 100-byte header)"));
  // The page size (1 means 65536) and, when valid (its change counter
  // matches), the page count the header declares. Not while a WAL file is
  // beside it: a checkpoint writes page 1 (the new count) before the pages
  // that grow the file, and quick_check reads the WAL's copy anyway. Read in
  // this order, header then WAL then size, because another process's
  // checkpoint grows the file before it deletes the WAL: a header read
  // mid-checkpoint sees the WAL still there, and a size read after the WAL
  // is gone sees the grown file. (Size first gave a false "truncated" to a
  // reader racing two writers.)
  std::uintmax_t page_size = BigEndian(header + 16, 2);
  if (page_size == 1) page_size = 65536;
  const std::uint32_t pages = BigEndian(header + 28, 4);
  const bool wal = fs::file_size(path + "-wal", ec) > 0 && !ec;
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec) return Status::InvalidArgument(DbError(path, ec.message()));
  if (!wal && pages > 0 && BigEndian(header + 24, 4) == BigEndian(header + 92, 4) && size < pages * page_size)
    return Status::InvalidArgument(DbError(path, "not a SQLite database (truncated: " + std::to_string(size) +
                                                     " bytes, its header says " +
                                                     std::to_string(pages * page_size) + ")"));
  *existing = true;
  return Status::Ok();
}

// How a reading command opens an existing store. A read-only SQLite
// connection to a WAL store creates the -wal and -shm files beside it when
// they are missing and, unable to take the write lock, never removes them;
// so where the directory and the file may be written, a reader opens the
// file for writing but with PRAGMA query_only, and SQLite removes both when
// the last connection closes. Where nothing can be written (a read-only
// mount, a read-only file or directory) and no WAL is beside it, no other
// process can change the file either: it is opened immutable, which reads
// without creating anything.
enum class ReaderAccess { kWriter, kQueryOnly, kImmutable, kReadOnly };

bool Writable(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::perms perms = fs::status(path, ec).permissions();
  if (ec) return false;
  // Mode bits as well as access(): root may write a 0444 file, but the user
  // who made it read-only meant it.
  const bool any_write =
      (perms & (fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write)) != fs::perms::none;
  return any_write && ::access(path.c_str(), W_OK) == 0;
}

ReaderAccess ReaderAccessFor(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) parent = ".";
  if (Writable(path) && Writable(parent.string())) return ReaderAccess::kQueryOnly;
  std::error_code ec;
  if (!std::filesystem::exists(path + "-wal", ec)) return ReaderAccess::kImmutable;
  return ReaderAccess::kReadOnly;
}

// `path` as an SQLite URI that opens it immutable (percent-encoding what a
// URI would read otherwise).
std::string ImmutableUri(const std::string& path) {
  std::string uri = "file:";
  for (const char c : path) {
    if (c == '%' || c == '?' || c == '#' || static_cast<unsigned char>(c) < 0x21 || c == 0x7f) {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(c));
      uri += buf;
    } else {
      uri += c;
    }
  }
  return uri + "?immutable=1";
}

// A name beside `path` no other process or thread of this one uses.
std::string ScratchNameFor(const std::string& path) {
  static std::atomic<int> counter{0};
  return path + ".new-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

void RemoveWithJournals(const std::string& path) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(path + suffix, ec);
}

// What a store's schema is made of, for comparing a file with what this
// build's migrations make: every table, index and trigger by name, and each
// table's columns by name (not their declared types or constraints, which a
// table rebuilt by hand may spell differently and the store never relies on).
using SchemaShape = std::vector<std::string>;

Result<SchemaShape> ShapeOf(sqlite3* db) {
  SchemaShape shape;
  std::vector<std::string> tables;
  {
    Statement st(db, "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name");
    KP_RETURN_IF_ERROR(st.status());
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) {
      shape.push_back(st.Text(0) + " " + st.Text(1));
      if (st.Text(0) == "table") tables.push_back(st.Text(1));
    }
    if (rc != SQLITE_DONE) return st.Error("read the schema");
  }
  for (const std::string& table : tables) {
    Statement st(db, "SELECT name FROM pragma_table_info(?)");
    KP_RETURN_IF_ERROR(st.status());
    st.Bind(1, table);
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) shape.push_back("column " + table + "." + st.Text(0));
    if (rc != SQLITE_DONE) return st.Error("read the schema");
  }
  return shape;
}

// The shape this build's migrations give a store at `version`, made in
// memory (a few milliseconds).
Result<SchemaShape> ReferenceShape(int version) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return Status::Internal("sqlite: cannot open an in-memory database");
  }
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> owner(db, sqlite3_close);
  for (int v = 0; v < version; ++v)
    if (sqlite3_exec(db, kMigrations[v], nullptr, nullptr, nullptr) != SQLITE_OK)
      return Status::Internal(std::string("sqlite: migration ") + std::to_string(v) + ": " + sqlite3_errmsg(db));
  return ShapeOf(db);
}

// The first difference between a file's shape and the reference, in words.
std::string ShapeDifference(const SchemaShape& file, const SchemaShape& reference) {
  for (const std::string& item : reference)
    if (std::find(file.begin(), file.end(), item) == file.end()) return item + " is missing";
  for (const std::string& item : file)
    if (std::find(reference.begin(), reference.end(), item) == reference.end()) return item + " is not ours";
  return "";
}

}  // namespace

Status Store::CheckIdentity(int version) {
  // Ours: our application id, or (a store made before the id was set) a
  // schema equal to what our migrations make at its version. An empty
  // database (no schema at all) is a new store. Anything else belongs to
  // another program, or was damaged or hand-edited, and is not written to.
  KP_ASSIGN_OR_RETURN(const int application_id, PragmaInt("application_id"));
  KP_ASSIGN_OR_RETURN(const SchemaShape shape, ShapeOf(db_));
  if (application_id != 0 && application_id != kApplicationId)
    return Status::InvalidArgument(DbError(path_, "not a kimi-plan store (its application id is " +
                                                      std::to_string(application_id) +
                                                      ", another program's); name another file"));
  if (application_id == 0 && version == 0 && shape.empty()) return Status::Ok();
  if (application_id == 0 && version == 0)
    return Status::InvalidArgument(
        DbError(path_, "not a kimi-plan store (a SQLite database of another program: " + shape.front() +
                           ", no kimi-plan schema version); name another file"));
  KP_ASSIGN_OR_RETURN(const SchemaShape reference, ReferenceShape(version));
  const std::string difference = ShapeDifference(shape, reference);
  if (difference.empty()) return Status::Ok();
  const std::string what = application_id == kApplicationId ? "a damaged kimi-plan store" : "not a kimi-plan store";
  return Status::InvalidArgument(DbError(path_, what + " (schema version " + std::to_string(version) + ", but " +
                                                    difference + "); name another file"));
}

Status Store::CreateWhole(const std::string& path, const Clock& clock) {
  // SQLite creates a file empty and writes its header and schema later, so
  // a reader between the two would see an empty or headless file. Built
  // under another name and closed (which checkpoints the WAL into it), it
  // is linked into place complete; link, unlike rename, never replaces a
  // store another process linked first.
  const std::string scratch = ScratchNameFor(path);
  {
    Result<std::unique_ptr<Store>> made = OpenInPlace(scratch, clock, StoreMode::kWrite);
    if (!made.ok()) {
      RemoveWithJournals(scratch);
      return made.status();
    }
  }
  int rc = ::link(scratch.c_str(), path.c_str());
  if (rc != 0 && errno != EEXIST) rc = ::rename(scratch.c_str(), path.c_str());  // a file system without links
  const int err = rc == 0 || errno == EEXIST ? 0 : errno;
  RemoveWithJournals(scratch);
  if (err != 0) return Status::IoError(DbError(path, std::string("cannot create: ") + std::strerror(err)));
  return Status::Ok();
}

Result<std::unique_ptr<Store>> Store::Open(const std::string& path, const Clock& clock, StoreMode mode) {
  if (path.empty()) return Status::InvalidArgument("--db: the path is empty; name the database file");
  if (mode == StoreMode::kWrite || path == ":memory:") return OpenChecked(path, clock, StoreMode::kWrite);
  KP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenChecked(path, clock, StoreMode::kRead));
  const int version = store->SchemaVersion();
  if (version == kSchemaVersion) return store;
  // Older than this build: migrate it through a writing open, which refuses
  // a read-only file with its reason.
  store.reset();
  Result<std::unique_ptr<Store>> written = OpenChecked(path, clock, StoreMode::kWrite);
  if (!written.ok())
    return written.status().WithContext("schema version " + std::to_string(version) + " needs migrating to " +
                                        std::to_string(kSchemaVersion));
  return written;
}

Status Store::CheckPath(const std::string& path, StoreMode mode) {
  if (path.empty()) return Status::InvalidArgument("--db: the path is empty; name the database file");
  if (path == ":memory:") return Status::Ok();
  bool existing = false;
  return CheckDbFile(path, mode, &existing);
}

Result<std::unique_ptr<Store>> Store::OpenChecked(const std::string& path, const Clock& clock, StoreMode mode) {
  std::error_code ec;
  if (path != ":memory:" && mode == StoreMode::kWrite && !std::filesystem::exists(path, ec)) {
    KP_RETURN_IF_ERROR(Store::CheckPath(path, mode));
    KP_RETURN_IF_ERROR(CreateWhole(path, clock));
  }
  return OpenInPlace(path, clock, mode);
}

Result<std::unique_ptr<Store>> Store::OpenInPlace(const std::string& path, const Clock& clock, StoreMode mode) {
  const bool memory = path == ":memory:";
  bool existing = false;
  if (!memory) KP_RETURN_IF_ERROR(CheckDbFile(path, mode, &existing));
  sqlite3* db = nullptr;
  const ReaderAccess access = mode == StoreMode::kRead && !memory ? ReaderAccessFor(path) : ReaderAccess::kWriter;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  std::string name = path;
  if (access == ReaderAccess::kQueryOnly) flags = SQLITE_OPEN_READWRITE;
  if (access == ReaderAccess::kReadOnly) flags = SQLITE_OPEN_READONLY;
  if (access == ReaderAccess::kImmutable) {
    flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_URI;
    name = ImmutableUri(path);
  }
  if (sqlite3_open_v2(name.c_str(), &db, flags, nullptr) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Status::InvalidArgument(DbError(path, "cannot open (" + msg + ")"));
  }
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  std::unique_ptr<Store> store(new Store(db, clock, path));
  if (access == ReaderAccess::kQueryOnly) KP_RETURN_IF_ERROR(store->Exec("PRAGMA query_only = ON"));
  KP_ASSIGN_OR_RETURN(const int version, store->PragmaInt("user_version"));
  if (version > kSchemaVersion)
    return Status::InvalidArgument(DbError(path, "schema version " + std::to_string(version) +
                                                     " is newer than this build's " + std::to_string(kSchemaVersion) +
                                                     " (use a newer kimi-plan)"));
  if (existing) {
    Statement st(db, "PRAGMA quick_check(1)");
    const int rc = st.status().ok() ? st.Step() : sqlite3_errcode(db);
    if (rc != SQLITE_ROW) return store->SqlError(sqlite3_extended_errcode(db), "check the file");
    std::string verdict = st.Text(0);
    if (verdict != "ok") {
      std::replace(verdict.begin(), verdict.end(), '\n', ' ');  // one line
      return Status::InvalidArgument(DbError(path, "not a valid SQLite database (quick_check: " + verdict + ")"));
    }
  }
  KP_RETURN_IF_ERROR(store->CheckIdentity(version));
  KP_RETURN_IF_ERROR(store->Exec("PRAGMA foreign_keys = ON"));
  if (mode == StoreMode::kRead) return store;
  if (!memory) {
    std::string journal;
    {
      Statement st(db, "PRAGMA journal_mode");  // finalized before the mode can change
      const int rc = st.status().ok() ? st.Step() : sqlite3_errcode(db);
      if (rc != SQLITE_ROW) return store->SqlError(sqlite3_extended_errcode(db), "read the journal mode");
      journal = st.Text(0);
    }
    if (journal != "wal") KP_RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode = WAL"));
  }
  KP_RETURN_IF_ERROR(store->Migrate());
  return store;
}

Store::~Store() { sqlite3_close(db_); }

Status Store::Exec(const std::string& sql) {
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK)
    return SqlError(sqlite3_extended_errcode(db_), "");
  return Status::Ok();
}

Status Store::SqlError(int rc, const std::string& what) const {
  const std::string msg = sqlite3_errmsg(db_);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Status::InvalidArgument(DbError(path_, "locked by another writer for more than " +
                                                        std::to_string(kBusyTimeoutMs / 1000) + " s"));
    case SQLITE_NOTADB: return Status::InvalidArgument(DbError(path_, "not a SQLite database (" + msg + ")"));
    case SQLITE_CORRUPT: return Status::InvalidArgument(DbError(path_, "not a valid SQLite database (" + msg + ")"));
    case SQLITE_READONLY: return Status::InvalidArgument(DbError(path_, "cannot be written (" + msg + ")"));
    case SQLITE_CANTOPEN: return Status::InvalidArgument(DbError(path_, "cannot open (" + msg + ")"));
    default: return Status::IoError("sqlite" + (what.empty() ? "" : " " + what) + ": " + msg);
  }
}

int Store::SchemaVersion() const {
  Result<int> version = PragmaInt("user_version");
  return version.ok() ? *version : -1;
}

Result<int> Store::PragmaInt(const char* name) const {
  Statement st(db_, (std::string("PRAGMA ") + name).c_str());
  const int rc = st.status().ok() ? st.Step() : sqlite3_errcode(db_);
  if (rc != SQLITE_ROW) return SqlError(sqlite3_extended_errcode(db_), std::string("read ") + name);
  return static_cast<int>(st.Int(0));
}

Status Store::Migrate() {
  const int from = SchemaVersion();
  if (from < 0) return Status::IoError("sqlite: cannot read the schema version");
  for (int v = from; v < kSchemaVersion; ++v) {
    KP_RETURN_IF_ERROR(InTransaction([&] {
      // Another process may have migrated while this one waited for the lock.
      if (SchemaVersion() > v) return Status::Ok();
      KP_RETURN_IF_ERROR(Exec(kMigrations[v]));
      return Exec("PRAGMA user_version = " + std::to_string(v + 1));
    }));
  }
  // A store made before the id existed is marked ours once it is written.
  KP_ASSIGN_OR_RETURN(const int application_id, PragmaInt("application_id"));
  if (application_id == kApplicationId) return Status::Ok();
  return Exec("PRAGMA application_id = " + std::to_string(kApplicationId));
}

Status Store::InTransaction(const std::function<Status()>& body) {
  // Inside another transaction the body is a savepoint of it: its writes
  // are undone alone on failure, and committed with the outer one.
  if (!sqlite3_get_autocommit(db_)) {
    KP_RETURN_IF_ERROR(Exec("SAVEPOINT nested"));
    Status s = body();
    if (!s.ok()) {
      (void)Exec("ROLLBACK TO nested");
      (void)Exec("RELEASE nested");
      return s;
    }
    return Exec("RELEASE nested");
  }
  KP_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  Status s = body();
  // A failed rollback leaves the transaction to SQLite's own undo when the
  // connection closes; the body's or the commit's error is the one to report.
  if (!s.ok()) {
    (void)Exec("ROLLBACK");
    return s;
  }
  Status c = Exec("COMMIT");
  if (!c.ok()) (void)Exec("ROLLBACK");
  return c;
}

Result<std::int64_t> Store::InsertPlan(const PlanRecord& p) {
  std::int64_t id = 0;
  Status s = InTransaction([&]() -> Status {
    Statement st(db_,
                 "INSERT INTO plans (created_at, model, gpu, world, preset, feasible, step_time_s, "
                 "request_json, result_json, layer_split, layer_counts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    KP_RETURN_IF_ERROR(st.status());
    st.Bind(1, clock_.NowIso8601());
    st.Bind(2, p.model);
    st.Bind(3, p.gpu);
    st.Bind(4, static_cast<std::int64_t>(p.world));
    st.BindNullable(5, p.preset);
    st.Bind(6, static_cast<std::int64_t>(p.feasible ? 1 : 0));
    st.Bind(7, p.step_time_s);
    st.Bind(8, p.request_json);
    st.Bind(9, p.result_json);
    st.Bind(10, p.layer_split);
    st.BindNullable(11, p.layer_counts);
    if (st.Step() != SQLITE_DONE) return st.Error("insert plan");
    id = sqlite3_last_insert_rowid(db_);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return id;
}

Result<PlanRecord> Store::GetPlan(std::int64_t id) const {
  Statement st(db_, (std::string("SELECT ") + kPlanColumns + " FROM plans WHERE id = ?").c_str());
  KP_RETURN_IF_ERROR(st.status());
  st.Bind(1, id);
  const int rc = st.Step();
  if (rc == SQLITE_DONE) return Status::NotFound("--plan: no plan with id " + std::to_string(id));
  if (rc != SQLITE_ROW) return st.Error("read plan");
  return ReadPlan(st);
}

Result<std::vector<PlanRecord>> Store::ListPlans() const {
  Statement st(db_, (std::string("SELECT ") + kPlanColumns + " FROM plans ORDER BY id").c_str());
  KP_RETURN_IF_ERROR(st.status());
  std::vector<PlanRecord> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) out.push_back(ReadPlan(st));
  if (rc != SQLITE_DONE) return st.Error("list plans");
  return out;
}

Result<std::int64_t> Store::CreateRun(const RunRecord& r) {
  std::int64_t id = 0;
  Status s = InTransaction([&]() -> Status {
    Statement st(db_,
                 "INSERT INTO runs (created_at, kind, model, config_json, status, host, pid, source) "
                 "VALUES (?, ?, ?, ?, 'running', ?, ?, ?)");
    KP_RETURN_IF_ERROR(st.status());
    st.Bind(1, clock_.NowIso8601());
    st.Bind(2, r.kind);
    st.Bind(3, r.model);
    st.Bind(4, r.config_json);
    st.BindNullable(5, r.host);
    st.Bind(6, r.pid);
    st.BindNullable(7, r.source);
    if (st.Step() != SQLITE_DONE) return st.Error("insert run");
    id = sqlite3_last_insert_rowid(db_);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return id;
}

Status Store::EndRun(std::int64_t id, const Status& outcome) {
  return InTransaction([&]() -> Status {
    KP_ASSIGN_OR_RETURN(const RunRecord run, GetRun(id));
    if (run.status != "running")
      return Status::Internal("run " + std::to_string(id) + " has already ended (" +
                                        (run.status.empty() ? std::string("no status") : run.status) + ")");
    Statement st(db_, "UPDATE runs SET status = ?, error = ?, ended_at = ? WHERE id = ?");
    KP_RETURN_IF_ERROR(st.status());
    st.Bind(1, std::string(outcome.ok() ? "finished" : "failed"));
    st.BindNullable(2, outcome.ok() ? std::string() : outcome.message());
    st.Bind(3, clock_.NowIso8601());
    st.Bind(4, id);
    if (st.Step() != SQLITE_DONE) return st.Error("end run");
    return Status::Ok();
  });
}

Result<int> Store::EndRunsOfProcess(const std::string& host, std::int64_t pid, const Status& outcome) {
  int ended = 0;
  KP_RETURN_IF_ERROR(InTransaction([&]() -> Status {
    Statement st(db_,
                 "UPDATE runs SET status = 'failed', error = ?, ended_at = ? "
                 "WHERE status = 'running' AND host = ? AND pid = ?");
    KP_RETURN_IF_ERROR(st.status());
    st.Bind(1, outcome.message());
    st.Bind(2, clock_.NowIso8601());
    st.Bind(3, host);
    st.Bind(4, pid);
    if (st.Step() != SQLITE_DONE) return st.Error("end runs");
    ended = sqlite3_changes(db_);
    return Status::Ok();
  }));
  return ended;
}

Status Store::InsertStepRow(const StepRecord& r) {
  Statement st(db_,
               "INSERT INTO steps (run_id, step, loss, grad_norm, lr, tokens_per_s, step_time_s, "
               "peak_memory_bytes, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  KP_RETURN_IF_ERROR(st.status());
  st.Bind(1, r.run_id);
  st.Bind(2, static_cast<std::int64_t>(r.step));
  st.Bind(3, r.loss);
  st.Bind(4, r.grad_norm);
  st.Bind(5, r.lr);
  st.Bind(6, r.tokens_per_s);
  st.Bind(7, r.step_time_s);
  st.Bind(8, r.peak_memory_bytes);
  st.Bind(9, clock_.NowIso8601());
  if (st.Step() != SQLITE_DONE) return st.Error("append step");
  return Status::Ok();
}

Status Store::AppendStep(const StepRecord& r) {
  return InTransaction([&] { return InsertStepRow(r); });
}

Status Store::AppendLoopStep(const StepRecord& step, const LoopStepRecord& loop,
                             const std::vector<WeightSyncRecord>& syncs) {
  return InTransaction([&]() -> Status {
    KP_RETURN_IF_ERROR(InsertStepRow(step));
    Statement st(db_,
                 "INSERT INTO loop_steps (run_id, step, weight_version, reward_mean, distill_loss, pg_loss, "
                 "response_tokens_mean, generated_tokens, generation_s, generation_tokens_per_s, feedback_s, "
                 "teacher_s, train_s, wait_s, sync_s, sync_bytes) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    KP_RETURN_IF_ERROR(st.status());
    st.Bind(1, step.run_id);
    st.Bind(2, static_cast<std::int64_t>(step.step));
    st.Bind(3, loop.weight_version);
    st.Bind(4, loop.reward_mean);
    st.Bind(5, loop.distill_loss);
    st.Bind(6, loop.pg_loss);
    st.Bind(7, loop.response_tokens_mean);
    st.Bind(8, loop.generated_tokens);
    st.Bind(9, loop.generation_s);
    st.Bind(10, loop.generation_tokens_per_s);
    st.Bind(11, loop.feedback_s);
    st.Bind(12, loop.teacher_s);
    st.Bind(13, loop.train_s);
    st.Bind(14, loop.wait_s);
    st.Bind(15, loop.sync_s);
    st.Bind(16, loop.sync_bytes);
    if (st.Step() != SQLITE_DONE) return st.Error("append loop step");
    for (const WeightSyncRecord& w : syncs) {
      Statement ws(db_,
                   "INSERT INTO weight_syncs (run_id, version, mode, bytes, buckets, seconds) "
                   "VALUES (?, ?, ?, ?, ?, ?)");
      KP_RETURN_IF_ERROR(ws.status());
      ws.Bind(1, step.run_id);
      ws.Bind(2, w.version);
      ws.Bind(3, w.mode);
      ws.Bind(4, w.bytes);
      ws.Bind(5, static_cast<std::int64_t>(w.buckets));
      ws.Bind(6, w.seconds);
      if (ws.Step() != SQLITE_DONE) return ws.Error("append weight sync");
    }
    return Status::Ok();
  });
}

Result<std::vector<LoopStepRecord>> Store::ListLoopSteps(std::int64_t run_id) const {
  Statement st(db_,
               "SELECT step, weight_version, reward_mean, distill_loss, pg_loss, response_tokens_mean, "
               "generated_tokens, generation_s, generation_tokens_per_s, feedback_s, teacher_s, train_s, wait_s, "
               "sync_s, sync_bytes FROM loop_steps WHERE run_id = ? ORDER BY step");
  KP_RETURN_IF_ERROR(st.status());
  st.Bind(1, run_id);
  std::vector<LoopStepRecord> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) {
    LoopStepRecord r;
    r.step = static_cast<int>(st.Int(0));
    r.weight_version = st.Int(1);
    r.reward_mean = st.Real(2);
    if (!st.IsNull(3)) r.distill_loss = st.Real(3);
    if (!st.IsNull(4)) r.pg_loss = st.Real(4);
    r.response_tokens_mean = st.Real(5);
    r.generated_tokens = st.Int(6);
    r.generation_s = st.Real(7);
    r.generation_tokens_per_s = st.Real(8);
    r.feedback_s = st.Real(9);
    r.teacher_s = st.Real(10);
    r.train_s = st.Real(11);
    r.wait_s = st.Real(12);
    r.sync_s = st.Real(13);
    r.sync_bytes = st.Int(14);
    out.push_back(r);
  }
  if (rc != SQLITE_DONE) return st.Error("list loop steps");
  return out;
}

Status Store::AppendTraffic(const std::vector<TrafficRecord>& rows) {
  if (rows.empty()) return Status::Ok();
  return InTransaction([&]() -> Status {
    for (const TrafficRecord& r : rows) {
      Statement st(db_,
                   "INSERT INTO pipeline_traffic (run_id, step, stage, direction, entries, bytes) "
                   "VALUES (?, ?, ?, ?, ?, ?)");
      KP_RETURN_IF_ERROR(st.status());
      st.Bind(1, r.run_id);
      st.Bind(2, static_cast<std::int64_t>(r.step));
      st.Bind(3, static_cast<std::int64_t>(r.stage));
      st.Bind(4, r.direction);
      st.Bind(5, r.entries);
      st.Bind(6, r.bytes);
      if (st.Step() != SQLITE_DONE) return st.Error("append pipeline traffic");
    }
    return Status::Ok();
  });
}

Result<std::vector<TrafficRecord>> Store::ListTraffic(std::int64_t run_id) const {
  Statement st(db_,
               "SELECT run_id, step, stage, direction, entries, bytes FROM pipeline_traffic WHERE run_id = ? "
               "ORDER BY step, stage, direction DESC");
  KP_RETURN_IF_ERROR(st.status());
  st.Bind(1, run_id);
  std::vector<TrafficRecord> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) {
    TrafficRecord r;
    r.run_id = st.Int(0);
    r.step = static_cast<int>(st.Int(1));
    r.stage = static_cast<int>(st.Int(2));
    r.direction = st.Text(3);
    r.entries = st.Int(4);
    r.bytes = st.Int(5);
    out.push_back(r);
  }
  if (rc != SQLITE_DONE) return st.Error("list pipeline traffic");
  return out;
}

Result<RunRecord> Store::GetRun(std::int64_t id) const {
  Statement st(db_, (std::string("SELECT ") + kRunColumns + " FROM runs WHERE id = ?").c_str());
  KP_RETURN_IF_ERROR(st.status());
  st.Bind(1, id);
  const int rc = st.Step();
  if (rc == SQLITE_DONE) return Status::NotFound("--run: no run with id " + std::to_string(id));
  if (rc != SQLITE_ROW) return st.Error("read run");
  return ReadRun(st);
}

Result<std::vector<StepRecord>> Store::ListSteps(std::int64_t run_id) const {
  Statement st(db_, (std::string("SELECT ") + kStepColumns + " FROM steps WHERE run_id = ? ORDER BY step").c_str());
  KP_RETURN_IF_ERROR(st.status());
  st.Bind(1, run_id);
  std::vector<StepRecord> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) out.push_back(ReadStep(st));
  if (rc != SQLITE_DONE) return st.Error("list steps");
  return out;
}

Result<std::vector<RunRecord>> Store::ListRuns() const {
  Statement st(db_, (std::string("SELECT ") + kRunColumns + " FROM runs ORDER BY id").c_str());
  KP_RETURN_IF_ERROR(st.status());
  std::vector<RunRecord> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) out.push_back(ReadRun(st));
  if (rc != SQLITE_DONE) return st.Error("list runs");
  return out;
}

Result<std::int64_t> Store::FindRunBySource(const std::string& source) const {
  Statement st(db_, "SELECT id FROM runs WHERE source = ?");
  KP_RETURN_IF_ERROR(st.status());
  st.Bind(1, source);
  const int rc = st.Step();
  if (rc == SQLITE_ROW) return st.Int(0);
  if (rc != SQLITE_DONE) return st.Error("find run by source");
  return std::int64_t{0};
}

Result<int> Store::UpsertMetrics(std::int64_t run_id, const std::vector<MetricRecord>& metrics) {
  int changed = 0;
  KP_RETURN_IF_ERROR(InTransaction([&]() -> Status {
    // A row is written only when it is new or its value differs, so that
    // reading the same file again changes nothing and says so.
    Statement st(db_,
                 "INSERT INTO metrics (run_id, step, name, value) VALUES (?, ?, ?, ?) "
                 "ON CONFLICT (run_id, step, name) DO UPDATE SET value = excluded.value "
                 "WHERE value IS NOT excluded.value");
    KP_RETURN_IF_ERROR(st.status());
    for (const MetricRecord& m : metrics) {
      st.Reset();
      st.Bind(1, run_id);
      st.Bind(2, static_cast<std::int64_t>(m.step));
      st.Bind(3, m.name);
      st.Bind(4, m.value);
      if (st.Step() != SQLITE_DONE) return st.Error("upsert metric");
      changed += sqlite3_changes(db_);
    }
    return Status::Ok();
  }));
  return changed;
}

Result<StepColumns> Store::ListMetricColumns(std::int64_t run_id) const {
  Statement st(db_, "SELECT step, name, value FROM metrics WHERE run_id = ? ORDER BY step, name");
  KP_RETURN_IF_ERROR(st.status());
  st.Bind(1, run_id);
  std::map<std::string, std::map<int, double>> by_name;
  std::set<int> steps;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) {
    const int step = static_cast<int>(st.Int(0));
    by_name[st.Text(1)][step] = st.Real(2);
    steps.insert(step);
  }
  if (rc != SQLITE_DONE) return st.Error("list metrics");
  StepColumns out;
  out.steps.assign(steps.begin(), steps.end());
  for (const auto& [name, values] : by_name) {
    out.names.push_back(name);
    std::vector<std::optional<double>> column;
    for (int step : out.steps) {
      auto it = values.find(step);
      column.push_back(it == values.end() ? std::nullopt : std::optional<double>(it->second));
    }
    out.values.push_back(std::move(column));
  }
  return out;
}

Result<StepColumns> Store::ListStepColumns(std::int64_t run_id) const {
  // SELECT * rather than named columns: a metric a later migration adds
  // reaches the report without a change here. An SDPO run's loop metrics
  // join its steps (the reward under the name the report plots), only for
  // runs that logged them, so other runs' exports keep their columns.
  bool loop = false;
  {
    Statement count(db_, "SELECT count(*) FROM loop_steps WHERE run_id = ?");
    KP_RETURN_IF_ERROR(count.status());
    count.Bind(1, run_id);
    if (count.Step() != SQLITE_ROW) return count.Error("count loop steps");
    loop = count.Int(0) > 0;
  }
  Statement st(db_, loop ? "SELECT s.*, l.reward_mean AS reward, l.response_tokens_mean, l.generation_tokens_per_s, "
                           "l.teacher_s, l.sync_s, l.sync_bytes FROM steps s LEFT JOIN loop_steps l "
                           "ON l.run_id = s.run_id AND l.step = s.step WHERE s.run_id = ? ORDER BY s.step"
                         : "SELECT * FROM steps WHERE run_id = ? ORDER BY step");
  KP_RETURN_IF_ERROR(st.status());
  st.Bind(1, run_id);
  StepColumns out;
  std::vector<int> metric_cols;
  int step_col = -1;
  for (int c = 0; c < st.Columns(); ++c) {
    const std::string name = st.Name(c);
    if (name == "step") step_col = c;
    else if (name != "run_id" && name != "created_at") {
      metric_cols.push_back(c);
      out.names.push_back(name);
    }
  }
  if (step_col < 0) return Status::Internal("sqlite: the steps table has no step column");
  out.values.resize(metric_cols.size());
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) {
    out.steps.push_back(static_cast<int>(st.Int(step_col)));
    for (size_t i = 0; i < metric_cols.size(); ++i)
      out.values[i].push_back(st.IsNull(metric_cols[i]) ? std::nullopt : std::optional<double>(st.Real(metric_cols[i])));
  }
  if (rc != SQLITE_DONE) return st.Error("list step columns");
  return out;
}

Result<std::vector<TableCount>> Store::CountRows() const {
  Statement names(db_, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name");
  KP_RETURN_IF_ERROR(names.status());
  std::vector<TableCount> out;
  int rc;
  while ((rc = names.Step()) == SQLITE_ROW) out.push_back({names.Text(0), 0});
  if (rc != SQLITE_DONE) return names.Error("list tables");
  for (TableCount& t : out) {
    // The name comes from sqlite_master, not from the user; quoted anyway.
    Statement count(db_, ("SELECT count(*) FROM \"" + t.table + "\"").c_str());
    KP_RETURN_IF_ERROR(count.status());
    if (count.Step() != SQLITE_ROW) return count.Error("count rows");
    t.rows = count.Int(0);
  }
  return out;
}

Result<std::int64_t> Store::InsertSimulation(const SimulationRecord& r) {
  std::int64_t id = 0;
  Status s = InTransaction([&]() -> Status {
    Statement st(db_,
                 "INSERT INTO simulations (created_at, kind, plan_id, request_json, result_json) "
                 "VALUES (?, ?, ?, ?, ?)");
    KP_RETURN_IF_ERROR(st.status());
    st.Bind(1, clock_.NowIso8601());
    st.Bind(2, r.kind);
    if (r.plan_id > 0) st.Bind(3, r.plan_id);
    st.Bind(4, r.request_json);
    st.Bind(5, r.result_json);
    if (st.Step() != SQLITE_DONE) return st.Error("insert simulation");
    id = sqlite3_last_insert_rowid(db_);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return id;
}

Result<std::int64_t> Store::InsertCalibration(const CalibrationRecord& r) {
  std::int64_t id = 0;
  Status s = InTransaction([&]() -> Status {
    Statement st(db_, "INSERT INTO calibrations (created_at, gpu, path, table_json) VALUES (?, ?, ?, ?)");
    KP_RETURN_IF_ERROR(st.status());
    st.Bind(1, clock_.NowIso8601());
    st.Bind(2, r.gpu);
    st.Bind(3, r.path);
    st.Bind(4, r.table_json);
    if (st.Step() != SQLITE_DONE) return st.Error("insert calibration");
    id = sqlite3_last_insert_rowid(db_);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return id;
}

Result<std::vector<CalibrationRecord>> Store::ListCalibrations() const {
  Statement st(db_, "SELECT id, created_at, gpu, path, table_json FROM calibrations ORDER BY id");
  KP_RETURN_IF_ERROR(st.status());
  std::vector<CalibrationRecord> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW)
    out.push_back({st.Int(0), st.Text(1), st.Text(2), st.Text(3), st.Text(4)});
  if (rc != SQLITE_DONE) return st.Error("list calibrations");
  return out;
}

Result<std::vector<SimulationRecord>> Store::ListSimulations() const {
  Statement st(db_, "SELECT id, created_at, kind, COALESCE(plan_id, 0), request_json, result_json "
                    "FROM simulations ORDER BY id");
  KP_RETURN_IF_ERROR(st.status());
  std::vector<SimulationRecord> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) {
    SimulationRecord r;
    r.id = st.Int(0);
    r.created_at = st.Text(1);
    r.kind = st.Text(2);
    r.plan_id = st.Int(3);
    r.request_json = st.Text(4);
    r.result_json = st.Text(5);
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return st.Error("list simulations");
  return out;
}

}  // namespace kp
