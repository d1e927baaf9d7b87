#include "store/store.h"

#include <sqlite3.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>
#include <gtest/gtest.h>

namespace kp {
namespace {

PlanRecord Sample() {
  PlanRecord p;
  p.model = "kimi-k2.6";
  p.gpu = "h200";
  p.world = 128;
  p.preset = "h200-full";
  p.feasible = false;
  p.step_time_s = 6.5;
  p.request_json = "{}";
  p.result_json = "{\"feasible\": false}";
  return p;
}

TEST(StoreTest, OpensAtTheCurrentSchemaAndRoundTripsAPlan) {
  FakeClock clock(1700000000);
  auto s = Store::Open(":memory:", clock);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ((*s)->SchemaVersion(), Store::kSchemaVersion);
  auto id = (*s)->InsertPlan(Sample());
  ASSERT_TRUE(id.ok());
  auto back = (*s)->GetPlan(*id);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->model, "kimi-k2.6");
  EXPECT_EQ(back->world, 128);
  EXPECT_EQ(back->preset, "h200-full");
  EXPECT_FALSE(back->feasible);
  EXPECT_DOUBLE_EQ(back->step_time_s, 6.5);
  EXPECT_EQ(back->created_at, "2023-11-14T22:13:20Z");
  EXPECT_EQ((*s)->GetPlan(*id + 1).status().code(), Status::Code::kNotFound);
  EXPECT_EQ(back->layer_split, "even");
  EXPECT_EQ(back->layer_counts, "");
}

TEST(StoreTest, APlanKeepsItsLayerSplit) {
  FakeClock clock;
  auto s = Store::Open(":memory:", clock);
  ASSERT_TRUE(s.ok());
  PlanRecord p = Sample();
  p.layer_split = "megatron";
  p.layer_counts = "2,2,2,2";
  auto id = (*s)->InsertPlan(p);
  ASSERT_TRUE(id.ok()) << id.status().message();
  auto back = (*s)->GetPlan(*id);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->layer_split, "megatron");
  EXPECT_EQ(back->layer_counts, "2,2,2,2");
}

TEST(StoreTest, AFailedTransactionWritesNothing) {
  FakeClock clock;
  auto s = Store::Open(":memory:", clock);
  ASSERT_TRUE(s.ok());
  Status st = (*s)->InTransaction([&] {
    // Nested, the insert is a savepoint of the outer transaction: it
    // succeeds, and is undone with the outer one.
    EXPECT_TRUE((*s)->InsertPlan(Sample()).ok());
    return Status::InvalidArgument("stop");
  });
  EXPECT_FALSE(st.ok());
  auto all = (*s)->ListPlans();
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->empty());
}

TEST(StoreTest, ConstraintViolationsAreRolledBack) {
  FakeClock clock;
  auto s = Store::Open(":memory:", clock);
  ASSERT_TRUE(s.ok());
  PlanRecord bad = Sample();
  bad.world = 0;  // CHECK (world > 0)
  EXPECT_FALSE((*s)->InsertPlan(bad).ok());
  EXPECT_TRUE((*s)->ListPlans()->empty());
  EXPECT_TRUE((*s)->InsertPlan(Sample()).ok());
  EXPECT_EQ((*s)->ListPlans()->size(), 1u);
}

TEST(StoreTest, RefusesAFileFromANewerBuild) {
  const std::string path = ::testing::TempDir() + "/newer.db";
  std::remove(path.c_str());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_exec(db, "PRAGMA user_version = 99", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  FakeClock clock;
  auto s = Store::Open(path, clock);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("schema version 99"), std::string::npos);
}

// A bad --db is refused with one line naming the flag and the path, exit 2
// (InvalidArgument), and the file is left byte-identical or not created.
class BadStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/bad_store_" + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::filesystem::permissions(dir_, std::filesystem::perms::owner_all, std::filesystem::perm_options::add);
    std::filesystem::remove_all(dir_);
  }
  static void Write(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // A good store with one plan, closed (WAL checkpointed into the file).
  std::string GoodStore(const std::string& name) {
    const std::string path = dir_ + "/" + name;
    FakeClock clock;
    auto s = Store::Open(path, clock);
    EXPECT_TRUE(s.ok()) << s.status().message();
    EXPECT_TRUE((*s)->InsertPlan(Sample()).ok());
    return path;
  }
  // Opening `path` in `mode` is refused with a message holding `what`, and
  // the file is unchanged and nothing beside it is created.
  void ExpectRefused(const std::string& path, StoreMode mode, const std::string& what) {
    const bool existed = std::filesystem::exists(path);
    const std::string before = existed && !std::filesystem::is_directory(path) ? Read(path) : "";
    const auto entries = Entries();
    FakeClock clock;
    auto s = Store::Open(path, clock, mode);
    ASSERT_FALSE(s.ok()) << path;
    EXPECT_EQ(s.status().ExitCode(), 2) << s.status().message();
    EXPECT_EQ(s.status().message().rfind("--db: " + path, 0), 0u) << s.status().message();
    EXPECT_NE(s.status().message().find(what), std::string::npos) << s.status().message();
    EXPECT_EQ(s.status().message().find('\n'), std::string::npos);
    if (existed && !std::filesystem::is_directory(path)) {
      EXPECT_EQ(Read(path), before);
    }
    EXPECT_EQ(Entries(), entries) << "a file was created beside " << path;
  }
  std::vector<std::string> Entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_)) out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string dir_;
};

TEST_F(BadStoreTest, RefusesAnEmptyPath) {
  FakeClock clock;
  auto s = Store::Open("", clock);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().ExitCode(), 2);
  EXPECT_EQ(s.status().message().rfind("--db: ", 0), 0u);
  EXPECT_FALSE(Store::Open("", clock, StoreMode::kRead).ok());
}

TEST_F(BadStoreTest, RefusesAMissingDirectory) {
  ExpectRefused(dir_ + "/missing/x.db", StoreMode::kWrite, "does not exist");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/missing"));
}

TEST_F(BadStoreTest, RefusesADirectory) {
  std::filesystem::create_directories(dir_ + "/d.db");
  ExpectRefused(dir_ + "/d.db", StoreMode::kWrite, "is a directory");
  ExpectRefused(dir_ + "/d.db", StoreMode::kRead, "is a directory");
}

TEST_F(BadStoreTest, RefusesRandomBytes) {
  std::string bytes;
  for (int i = 0; i < 8192; ++i) bytes.push_back(static_cast<char>((i * 7919 + 13) % 251));
  Write(dir_ + "/random.db", bytes);
  ExpectRefused(dir_ + "/random.db", StoreMode::kWrite, "not a SQLite database");
  ExpectRefused(dir_ + "/random.db", StoreMode::kRead, "not a SQLite database");
}

TEST_F(BadStoreTest, RefusesATruncatedFile) {
  const std::string good = GoodStore("good.db");
  const std::string bytes = Read(good);
  ASSERT_GT(bytes.size(), 4096u);
  Write(dir_ + "/short.db", bytes.substr(0, 50));
  ExpectRefused(dir_ + "/short.db", StoreMode::kWrite, "truncated");
  Write(dir_ + "/half.db", bytes.substr(0, bytes.size() / 2));
  ExpectRefused(dir_ + "/half.db", StoreMode::kWrite, "truncated");
  ExpectRefused(dir_ + "/half.db", StoreMode::kRead, "truncated");
}

TEST_F(BadStoreTest, RefusesADamagedFile) {
  const std::string good = GoodStore("good.db");
  std::string bytes = Read(good);
  // Page 2 onwards overwritten: the header is fine, the b-trees are not.
  for (std::size_t i = 4096; i < bytes.size(); ++i) bytes[i] = static_cast<char>(0xA5);
  Write(dir_ + "/damaged.db", bytes);
  ExpectRefused(dir_ + "/damaged.db", StoreMode::kWrite, "not a valid SQLite database");
}

TEST_F(BadStoreTest, AReadOnlyFileIsRefusedForWritingAndReadForReading) {
  const std::string path = GoodStore("ro.db");
  std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::group_read |
                                         std::filesystem::perms::others_read);
  ExpectRefused(path, StoreMode::kWrite, "read-only");
  const std::string before = Read(path);
  FakeClock clock;
  {
    auto s = Store::Open(path, clock, StoreMode::kRead);
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ((*s)->ListPlans()->size(), 1u);
    EXPECT_FALSE((*s)->InsertPlan(Sample()).ok());
  }
  EXPECT_EQ(Read(path), before);
}

TEST_F(BadStoreTest, RefusesANewerSchemaWithoutTouchingIt) {
  const std::string path = dir_ + "/newer.db";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_exec(db, "CREATE TABLE t (x); PRAGMA user_version = 99", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  ExpectRefused(path, StoreMode::kWrite, "schema version 99 is newer than this build's");
  ExpectRefused(path, StoreMode::kRead, "schema version 99");
}

// Runs `sql` on the database at `path` with SQLite alone (another program).
void Sql(const std::string& path, const char* sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  sqlite3_close(db);
}

int PragmaOf(const std::string& path, const char* pragma) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, (std::string("PRAGMA ") + pragma).c_str(), -1, &st, nullptr);
  const int v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

// Stores are ours or refused (issue 28): another program's database, another
// application's id, a dropped table or a hand-set version are refused
// before anything is written, by readers and writers alike.
TEST_F(BadStoreTest, RefusesADatabaseThatIsNotAKimiPlanStore) {
  const std::string foreign = dir_ + "/foreign.db";
  Sql(foreign, "CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);");
  ExpectRefused(foreign, StoreMode::kWrite, "not a kimi-plan store (a SQLite database of another program: table t");
  ExpectRefused(foreign, StoreMode::kRead, "not a kimi-plan store");
  const std::string other = dir_ + "/other.db";
  Sql(other, "PRAGMA application_id = 42; CREATE TABLE plans (x);");
  ExpectRefused(other, StoreMode::kWrite, "its application id is 42, another program's");
  const std::string dropped = GoodStore("dropped.db");
  Sql(dropped, "DROP TABLE steps;");
  ExpectRefused(dropped, StoreMode::kWrite, "a damaged kimi-plan store (schema version 9, but table steps is missing)");
  ExpectRefused(dropped, StoreMode::kRead, "table steps is missing");
  const std::string hand = GoodStore("hand.db");
  Sql(hand, "PRAGMA user_version = 5;");
  ExpectRefused(hand, StoreMode::kWrite, "schema version 5, but index runs_by_source is not ours");
}

TEST_F(BadStoreTest, NewStoresCarryTheApplicationIdAndOldOnesGetItWhenWritten) {
  const std::string path = GoodStore("new.db");
  EXPECT_EQ(PragmaOf(path, "application_id"), Store::kApplicationId);
  // A store from before the id: our schema, id 0. Read as ours, and marked
  // when next written.
  Sql(path, "PRAGMA application_id = 0;");
  FakeClock clock;
  {
    auto read = Store::Open(path, clock, StoreMode::kRead);
    ASSERT_TRUE(read.ok()) << read.status().message();
  }
  EXPECT_EQ(PragmaOf(path, "application_id"), 0);
  {
    auto written = Store::Open(path, clock, StoreMode::kWrite);
    ASSERT_TRUE(written.ok()) << written.status().message();
  }
  EXPECT_EQ(PragmaOf(path, "application_id"), Store::kApplicationId);
  // An empty file is a new store.
  Write(dir_ + "/empty.db", "");
  auto empty = Store::Open(dir_ + "/empty.db", clock, StoreMode::kWrite);
  ASSERT_TRUE(empty.ok()) << empty.status().message();
}

// A reader leaves the directory as it found it: no -wal or -shm, whether it
// reads or refuses; where nothing can be written it reads immutable.
TEST_F(BadStoreTest, AReaderLeavesNothingBesideTheStore) {
  const std::string path = GoodStore("read.db");
  const auto entries = Entries();
  FakeClock clock;
  {
    auto s = Store::Open(path, clock, StoreMode::kRead);
    ASSERT_TRUE(s.ok()) << s.status().message();
    ASSERT_EQ((*s)->ListPlans()->size(), 1u);
    // query_only: a reader cannot write even by mistake.
    EXPECT_FALSE((*s)->InsertPlan(Sample()).ok());
  }
  EXPECT_EQ(Entries(), entries);
  Sql(path, "PRAGMA user_version = 99;");
  const std::string before = Read(path);
  ExpectRefused(path, StoreMode::kRead, "schema version 99 is newer");
  EXPECT_EQ(Read(path), before);
  Sql(path, ("PRAGMA user_version = " + std::to_string(Store::kSchemaVersion) + ";").c_str());
  std::filesystem::permissions(path, std::filesystem::perms::owner_read);
  std::filesystem::permissions(dir_, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  {
    auto s = Store::Open(path, clock, StoreMode::kRead);
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ((*s)->ListPlans()->size(), 1u);
  }
  std::filesystem::permissions(dir_, std::filesystem::perms::owner_all);
  EXPECT_EQ(Entries(), entries);
}

TEST_F(BadStoreTest, ReadingAMissingFileIsNotFoundAndCreatesNothing) {
  FakeClock clock;
  auto s = Store::Open(dir_ + "/none.db", clock, StoreMode::kRead);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kNotFound);
  EXPECT_TRUE(Entries().empty());
}

TEST_F(BadStoreTest, AWriteLockHeldLongerThanTheTimeoutIsOneLine) {
  const std::string path = GoodStore("locked.db");
  sqlite3* holder = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &holder), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(holder, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  FakeClock clock;
  auto s = Store::Open(path, clock);
  ASSERT_TRUE(s.ok()) << s.status().message();  // opening and reading do not wait in WAL mode
  EXPECT_EQ((*s)->ListPlans()->size(), 1u);
  auto id = (*s)->InsertPlan(Sample());  // waits kBusyTimeoutMs, then gives up
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().message(), "--db: " + path + ": locked by another writer for more than 5 s");
  EXPECT_EQ(id.status().ExitCode(), 2);
  sqlite3_exec(holder, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(holder);
  EXPECT_TRUE((*s)->InsertPlan(Sample()).ok());
}

// Creators race to make one new store while a reader polls it: the reader
// only ever finds no file or a whole store, both creators write to the one
// store that won, and no scratch file is left beside it.
TEST_F(BadStoreTest, ConcurrentCreatorsShareOneWholeStoreAndAReaderSeesNoHalfOfIt) {
  for (int round = 0; round < 20; ++round) {
    const std::string path = dir_ + "/race" + std::to_string(round) + ".db";
    std::atomic<bool> done{false};
    std::vector<std::string> reader_errors;
    std::thread reader([&] {
      FakeClock clock;
      while (!done) {
        auto r = Store::Open(path, clock, StoreMode::kRead);
        if (!r.ok() && r.status().code() != Status::Code::kNotFound) reader_errors.push_back(r.status().message());
      }
    });
    std::vector<Status> results(3);
    std::vector<std::thread> writers;
    for (int w = 0; w < 3; ++w)
      writers.emplace_back([&, w] {
        FakeClock clock;
        auto s = Store::Open(path, clock);
        results[w] = s.ok() ? (*s)->InsertPlan(Sample()).status() : s.status();
      });
    for (auto& t : writers) t.join();
    done = true;
    reader.join();
    for (const Status& r : results) EXPECT_TRUE(r.ok()) << r.message();
    EXPECT_TRUE(reader_errors.empty()) << reader_errors.front();
    FakeClock clock;
    auto s = Store::Open(path, clock, StoreMode::kRead);
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ((*s)->ListPlans()->size(), 3u);
  }
  for (const std::string& e : Entries()) EXPECT_EQ(e.find(".new-"), std::string::npos) << e;
}

TEST(StoreTest, ReopeningKeepsRecordsAndDoesNotMigrateTwice) {
  const std::string path = ::testing::TempDir() + "/reopen.db";
  std::remove(path.c_str());
  FakeClock clock;
  {
    auto s = Store::Open(path, clock);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->InsertPlan(Sample()).ok());
  }
  auto s = Store::Open(path, clock);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->SchemaVersion(), Store::kSchemaVersion);
  EXPECT_EQ((*s)->ListPlans()->size(), 1u);
}

RunRecord SampleRun() {
  RunRecord r;
  r.kind = "train";
  r.model = "kimi-k3-debug";
  r.config_json = "{\"steps\": 200}";
  return r;
}

// An ingested run: found by its file, its metrics written once whatever
// how often they are given, a changed value replaced, and read back as
// columns over every step any of them has.
TEST(StoreTest, IngestedRunsKeepTheirMetricsByNameOnce) {
  FakeClock clock;
  auto s = Store::Open(":memory:", clock);
  ASSERT_TRUE(s.ok());
  Store& store = **s;
  EXPECT_EQ(*store.FindRunBySource("/jobs/a/verl-metrics.jsonl"), 0);
  RunRecord run = SampleRun();
  run.kind = "verl";
  run.source = "/jobs/a/verl-metrics.jsonl";
  const std::int64_t id = *store.CreateRun(run);
  EXPECT_EQ(*store.FindRunBySource(run.source), id);
  EXPECT_EQ(store.GetRun(id)->source, run.source);
  EXPECT_FALSE(store.CreateRun(run).ok());  // one run per file
  const std::vector<MetricRecord> metrics = {
      {0, "val-core/acc", 0.25}, {1, "timing_s/step", 12.5}, {1, "timing_s/gen", 4.0}, {2, "timing_s/step", 11.0}};
  EXPECT_EQ(*store.UpsertMetrics(id, metrics), 4);
  EXPECT_EQ(*store.UpsertMetrics(id, metrics), 0);
  EXPECT_EQ(*store.UpsertMetrics(id, {{2, "timing_s/step", 11.5}, {2, "timing_s/gen", 3.5}}), 2);
  const StepColumns c = *store.ListMetricColumns(id);
  EXPECT_EQ(c.steps, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(c.names, (std::vector<std::string>{"timing_s/gen", "timing_s/step", "val-core/acc"}));
  EXPECT_EQ(c.values[0], (std::vector<std::optional<double>>{std::nullopt, 4.0, 3.5}));
  EXPECT_EQ(c.values[1], (std::vector<std::optional<double>>{std::nullopt, 12.5, 11.5}));
  EXPECT_EQ(c.values[2], (std::vector<std::optional<double>>{0.25, std::nullopt, std::nullopt}));
  EXPECT_FALSE(store.UpsertMetrics(id, {{-1, "x", 1}}).ok());
}

StepRecord SampleStep(std::int64_t run, int step) {
  StepRecord s;
  s.run_id = run;
  s.step = step;
  s.loss = 8.0 - 0.5 * step;
  s.grad_norm = 1.0 + step;
  s.lr = 1e-3;
  s.tokens_per_s = 1000.0 * step;
  s.step_time_s = 0.25;
  s.peak_memory_bytes = 1e9;
  return s;
}

TEST(StoreTest, MigratesAVersion1FileToRuns) {
  const std::string path = ::testing::TempDir() + "/v1.db";
  std::remove(path.c_str());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  // Exactly migration 0 -> 1, as a version-1 build left the file.
  sqlite3_exec(db,
               "CREATE TABLE plans (id INTEGER PRIMARY KEY AUTOINCREMENT, created_at TEXT NOT NULL, model TEXT NOT "
               "NULL, gpu TEXT NOT NULL, world INTEGER NOT NULL CHECK (world > 0), preset TEXT, feasible INTEGER NOT "
               "NULL CHECK (feasible IN (0, 1)), step_time_s REAL NOT NULL, request_json TEXT NOT NULL, result_json "
               "TEXT NOT NULL); PRAGMA user_version = 1;"
               "INSERT INTO plans (created_at, model, gpu, world, feasible, step_time_s, request_json, result_json) "
               "VALUES ('2023-11-14T22:13:20Z', 'm', 'h200', 8, 1, 1.0, '{}', '{}');",
               nullptr, nullptr, nullptr);
  sqlite3_close(db);
  FakeClock clock;
  auto s = Store::Open(path, clock);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ((*s)->SchemaVersion(), Store::kSchemaVersion);
  EXPECT_TRUE((*s)->CreateRun(SampleRun()).ok());
  EXPECT_TRUE((*s)->ListSimulations()->empty());
  // A plan from before version 6 was sized with the even split.
  auto old = (*s)->GetPlan(1);
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_EQ(old->layer_split, "even");
  EXPECT_EQ(old->layer_counts, "");
}

TEST(StoreTest, ARunIsRunningUntilItEndsOnce) {
  FakeClock clock(1700000000);
  auto s = Store::Open(":memory:", clock);
  ASSERT_TRUE(s.ok());
  RunRecord r = SampleRun();
  r.host = "node-7";
  r.pid = 4242;
  const std::int64_t ok_run = *(*s)->CreateRun(r), failed_run = *(*s)->CreateRun(r);
  auto running = (*s)->GetRun(ok_run);
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(running->status, "running");
  EXPECT_EQ(running->host, "node-7");
  EXPECT_EQ(running->pid, 4242);
  EXPECT_EQ(running->ended_at, "");
  clock.Advance(60);
  ASSERT_TRUE((*s)->EndRun(ok_run, Status::Ok()).ok());
  ASSERT_TRUE((*s)->EndRun(failed_run, Status::IoError("step 3: loss is nan")).ok());
  auto done = (*s)->GetRun(ok_run), failed = (*s)->GetRun(failed_run);
  EXPECT_EQ(done->status, "finished");
  EXPECT_EQ(done->error, "");
  EXPECT_EQ(done->ended_at, "2023-11-14T22:14:20Z");
  EXPECT_EQ(failed->status, "failed");
  EXPECT_EQ(failed->error, "step 3: loss is nan");
  // The first ending stands.
  EXPECT_EQ((*s)->EndRun(failed_run, Status::Ok()).code(), Status::Code::kInternal);
  EXPECT_EQ((*s)->GetRun(failed_run)->status, "failed");
  EXPECT_EQ((*s)->EndRun(99, Status::Ok()).code(), Status::Code::kNotFound);
}

TEST(StoreTest, RunsFromBeforeSchema8HaveNoStatus) {
  const std::string path = ::testing::TempDir() + "/v7.db";
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
  FakeClock clock;
  {
    auto s = Store::Open(path, clock);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->CreateRun(SampleRun()).ok());
  }
  // Back to version 7's runs table: drop the five columns schema 8 added
  // (and the source column schema 9 added, with its index), and schema 9's
  // metrics table.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "CREATE TABLE runs7 AS SELECT id, created_at, kind, model, config_json FROM runs;"
                         "DROP TABLE runs; ALTER TABLE runs7 RENAME TO runs; DROP TABLE metrics; "
                         "PRAGMA user_version = 7;",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto s = Store::Open(path, clock);
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto old = (*s)->GetRun(1);
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_EQ(old->status, "");
  EXPECT_EQ(old->pid, 0);
  EXPECT_EQ((*s)->EndRun(1, Status::Ok()).code(), Status::Code::kInternal);
}

TEST(StoreTest, RoundTripsARunAndItsSteps) {
  FakeClock clock(1700000000);
  auto s = Store::Open(":memory:", clock);
  ASSERT_TRUE(s.ok());
  auto run = (*s)->CreateRun(SampleRun());
  ASSERT_TRUE(run.ok()) << run.status().message();
  for (int step = 1; step <= 3; ++step) ASSERT_TRUE((*s)->AppendStep(SampleStep(*run, step)).ok());
  auto back = (*s)->GetRun(*run);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->kind, "train");
  EXPECT_EQ(back->model, "kimi-k3-debug");
  EXPECT_EQ(back->config_json, "{\"steps\": 200}");
  EXPECT_EQ(back->created_at, "2023-11-14T22:13:20Z");
  auto steps = (*s)->ListSteps(*run);
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 3u);
  EXPECT_EQ((*steps)[2].step, 3);
  EXPECT_DOUBLE_EQ((*steps)[2].loss, 6.5);
  EXPECT_DOUBLE_EQ((*steps)[2].tokens_per_s, 3000.0);
  EXPECT_DOUBLE_EQ((*steps)[0].peak_memory_bytes, 1e9);
  EXPECT_EQ((*s)->GetRun(*run + 1).status().code(), Status::Code::kNotFound);
}

TEST(StoreTest, RoundTripsPipelineTrafficAndRefusesABadDirection) {
  FakeClock clock;
  auto s = Store::Open(":memory:", clock);
  ASSERT_TRUE(s.ok());
  auto run = (*s)->CreateRun(SampleRun());
  ASSERT_TRUE(run.ok());
  std::vector<TrafficRecord> rows = {{*run, 1, 1, "backward", 2, 4096}, {*run, 1, 0, "forward", 5, 10240},
                                     {*run, 1, 1, "forward", 3, 6144}};
  ASSERT_TRUE((*s)->AppendTraffic(rows).ok());
  auto back = (*s)->ListTraffic(*run);
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->size(), 3u);
  EXPECT_EQ((*back)[0].stage, 0);
  EXPECT_EQ((*back)[1].direction, "forward");
  EXPECT_EQ((*back)[2].direction, "backward");
  EXPECT_EQ((*back)[2].bytes, 4096);
  // One bad row rolls the whole step back.
  EXPECT_FALSE((*s)->AppendTraffic({{*run, 2, 0, "forward", 1, 1}, {*run, 2, 0, "sideways", 1, 1}}).ok());
  EXPECT_EQ((*s)->ListTraffic(*run)->size(), 3u);
}

TEST(StoreTest, RoundTripsALoopStepWithItsSyncsInOneTransaction) {
  FakeClock clock;
  auto s = Store::Open(":memory:", clock);
  ASSERT_TRUE(s.ok());
  auto run = (*s)->CreateRun(SampleRun());
  ASSERT_TRUE(run.ok());
  LoopStepRecord loop;
  loop.weight_version = 1;
  loop.reward_mean = 0.375;
  loop.distill_loss = 0.125;
  loop.response_tokens_mean = 3.5;
  loop.generated_tokens = 112;
  loop.generation_s = 0.5;
  loop.generation_tokens_per_s = 224;
  loop.sync_s = 0.25;
  loop.sync_bytes = 4096;
  ASSERT_TRUE((*s)->AppendLoopStep(SampleStep(*run, 1), loop, {{2, "lora", 4096, 1, 0.25}}).ok());
  auto back = (*s)->ListLoopSteps(*run);
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ((*back)[0].step, 1);
  EXPECT_EQ((*back)[0].weight_version, 1);
  EXPECT_EQ((*back)[0].reward_mean, 0.375);
  EXPECT_EQ((*back)[0].distill_loss, 0.125);
  EXPECT_FALSE((*back)[0].pg_loss.has_value());  // NULL, not 0
  EXPECT_EQ((*back)[0].sync_bytes, 4096);
  EXPECT_EQ((*s)->ListSteps(*run)->size(), 1u);
  // The report's column reader sees the loop's metrics, the reward under its name.
  auto cols = (*s)->ListStepColumns(*run);
  ASSERT_TRUE(cols.ok()) << cols.status().message();
  const auto reward = std::find(cols->names.begin(), cols->names.end(), "reward");
  ASSERT_NE(reward, cols->names.end());
  EXPECT_EQ(cols->values[reward - cols->names.begin()][0], 0.375);
  auto plain = (*s)->CreateRun(SampleRun());
  ASSERT_TRUE((*s)->AppendStep(SampleStep(*plain, 1)).ok());
  auto plain_cols = (*s)->ListStepColumns(*plain);
  ASSERT_TRUE(plain_cols.ok());
  EXPECT_EQ(std::count(plain_cols->names.begin(), plain_cols->names.end(), "reward"), 0);
  // A bad sync mode rolls back the step's steps and loop_steps rows too.
  EXPECT_FALSE((*s)->AppendLoopStep(SampleStep(*run, 2), loop, {{3, "half", 1, 1, 0.1}}).ok());
  EXPECT_EQ((*s)->ListSteps(*run)->size(), 1u);
  EXPECT_EQ((*s)->ListLoopSteps(*run)->size(), 1u);
}

TEST(StoreTest, RefusesADuplicateStepAndAStepOfNoRun) {
  FakeClock clock;
  auto s = Store::Open(":memory:", clock);
  ASSERT_TRUE(s.ok());
  auto run = (*s)->CreateRun(SampleRun());
  ASSERT_TRUE(run.ok());
  ASSERT_TRUE((*s)->AppendStep(SampleStep(*run, 1)).ok());
  EXPECT_FALSE((*s)->AppendStep(SampleStep(*run, 1)).ok());
  EXPECT_FALSE((*s)->AppendStep(SampleStep(*run + 7, 1)).ok());  // foreign key
  EXPECT_EQ((*s)->ListSteps(*run)->size(), 1u);
}

// A child process logs steps and is killed with SIGKILL mid-run, without
// closing the database: every step it appended is still there.
TEST(StoreTest, AKilledRunKeepsEveryLoggedStep) {
  const std::string path = ::testing::TempDir() + "/killed.db";
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
  FakeClock clock;
  std::int64_t run = 0;
  {
    auto s = Store::Open(path, clock);
    ASSERT_TRUE(s.ok());
    run = *(*s)->CreateRun(SampleRun());
  }
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto s = Store::Open(path, clock);
    if (!s.ok()) _exit(3);
    for (int step = 1; step <= 5; ++step)
      if (!(*s)->AppendStep(SampleStep(run, step)).ok()) _exit(4);
    const char byte = 1;
    if (write(ready[1], &byte, 1) != 1) _exit(5);
    pause();  // "training" the next step when the kill comes
    _exit(0);
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  close(ready[0]);
  close(ready[1]);
  auto s = Store::Open(path, clock);
  ASSERT_TRUE(s.ok());
  auto steps = (*s)->ListSteps(run);
  ASSERT_TRUE(steps.ok());
  ASSERT_EQ(steps->size(), 5u);
  EXPECT_EQ(steps->back().step, 5);
  EXPECT_DOUBLE_EQ(steps->back().loss, 5.5);
}

TEST(StoreTest, SimulationsReferenceAnExistingPlan) {
  FakeClock clock;
  auto s = Store::Open(":memory:", clock);
  ASSERT_TRUE(s.ok());
  auto plan = (*s)->InsertPlan(Sample());
  ASSERT_TRUE(plan.ok());
  SimulationRecord sim;
  sim.kind = "loop";
  sim.plan_id = *plan;
  sim.request_json = "{}";
  sim.result_json = "{}";
  ASSERT_TRUE((*s)->InsertSimulation(sim).ok());
  sim.plan_id = *plan + 10;  // no such plan: the foreign key refuses it
  EXPECT_FALSE((*s)->InsertSimulation(sim).ok());
  sim.plan_id = 0;
  sim.kind = "weather";      // not a simulation kind
  EXPECT_FALSE((*s)->InsertSimulation(sim).ok());
  auto all = (*s)->ListSimulations();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ(all->front().plan_id, *plan);
}

TEST(StoreTest, CalibrationsRoundTrip) {
  FakeClock clock(1.8e9);
  auto s = Store::Open(":memory:", clock);
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto id = (*s)->InsertCalibration({0, "", "h200", "presets/calibration/h200.json", "{\"gpu\": \"h200\"}"});
  ASSERT_TRUE(id.ok()) << id.status().message();
  auto back = (*s)->ListCalibrations();
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->size(), 1u);
  EXPECT_EQ((*back)[0].id, *id);
  EXPECT_EQ((*back)[0].gpu, "h200");
  EXPECT_EQ((*back)[0].path, "presets/calibration/h200.json");
  EXPECT_EQ((*back)[0].table_json, "{\"gpu\": \"h200\"}");
  EXPECT_EQ((*back)[0].created_at, clock.NowIso8601());
}

}  // namespace
}  // namespace kp
