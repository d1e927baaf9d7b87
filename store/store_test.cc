#include "store/store.h"

#include <sqlite3.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
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
    EXPECT_TRUE((*s)->InsertPlan(Sample()).ok() == false);  // nested BEGIN is refused
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
