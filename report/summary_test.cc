#include "report/summary.h"

#include <sqlite3.h>

#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "report/test_util.h"

namespace kp {
namespace {

using testing::MakeRun;

StepRecord Step(std::int64_t run, int step, double loss, double step_time, double peak) {
  StepRecord s;
  s.run_id = run;
  s.step = step;
  s.loss = loss;
  s.grad_norm = 1.0 / step;
  s.lr = 1e-3;
  s.tokens_per_s = 100.0 * step;
  s.step_time_s = step_time;
  s.peak_memory_bytes = peak;
  return s;
}

// A store in a temporary file, so the test can also reach it with sqlite3
// directly (to add a column, as a later migration would).
class StoreFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("kp_report_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db"))
                .string();
    std::filesystem::remove(path_);
    auto s = Store::Open(path_, clock_);
    ASSERT_TRUE(s.ok()) << s.status().message();
    store_ = std::move(s).value();
  }
  void TearDown() override {
    store_.reset();
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path_ + suffix);
  }
  void Sql(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  std::int64_t Run(const std::string& config) {
    RunRecord r;
    r.kind = "train";
    r.model = "kimi-k3-debug";
    r.config_json = config;
    return *store_->CreateRun(r);
  }
  FakeClock clock_{1700000000};
  std::string path_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreFile, LoadsStepsByColumnAndReadsAColumnAddedLater) {
  const std::int64_t id = Run("{\"plan_id\": 7}");
  for (int s = 1; s <= 3; ++s) ASSERT_TRUE(store_->AppendStep(Step(id, s, 4.0 - s, 0.5, 1e9)).ok());
  // What a later migration adding an optional reward would leave: NULL where
  // a run did not log it.
  Sql("ALTER TABLE steps ADD COLUMN reward REAL; UPDATE steps SET reward = step * 0.25 WHERE step > 1");
  auto r = LoadRun(*store_, id, "RUN");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->plan_id, 7);
  EXPECT_EQ(r->steps.steps, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(r->steps.names, (std::vector<std::string>{"loss", "grad_norm", "lr", "tokens_per_s", "step_time_s",
                                                      "peak_memory_bytes", "reward"}));
  EXPECT_EQ(*r->At("loss", 2), 2.0);
  EXPECT_FALSE(r->At("reward", 1).has_value());
  EXPECT_EQ(r->Series("reward"), (std::vector<std::pair<int, double>>{{2, 0.5}, {3, 0.75}}));
  EXPECT_TRUE(r->LogsMetric("reward"));
  EXPECT_TRUE(Summarise(*r, std::nullopt).reward.has_value());
}

TEST_F(StoreFile, UnknownRunNamesTheFlag) {
  auto r = LoadRun(*store_, 9, "--reference");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
  EXPECT_EQ(r.status().message(), "--reference: no run with id 9");
}

TEST_F(StoreFile, ListsRunsAndCountsEveryTable) {
  Run("{}");
  Run("{}");
  auto runs = store_->ListRuns();
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_EQ((*runs)[1].id, 2);
  // A table a later migration might add shows up without a change to the reader.
  Sql("CREATE TABLE future_metrics (run_id INTEGER, bytes REAL); INSERT INTO future_metrics VALUES (1, 2)");
  auto counts = store_->CountRows();
  ASSERT_TRUE(counts.ok());
  std::vector<std::pair<std::string, std::int64_t>> got;
  for (const TableCount& t : *counts) got.emplace_back(t.table, t.rows);
  EXPECT_EQ(got, (std::vector<std::pair<std::string, std::int64_t>>{
                     {"calibrations", 0}, {"future_metrics", 1}, {"loop_steps", 0}, {"metrics", 0}, {"pipeline_traffic", 0}, {"plans", 0},
                     {"runs", 2}, {"simulations", 0}, {"steps", 0}, {"weight_syncs", 0}}));
}

TEST(StatsTest, TenthsMedianAndMax) {
  std::vector<std::pair<int, double>> s;
  for (int i = 1; i <= 20; ++i) s.emplace_back(i, i);  // values 1..20
  const MetricStats m = Stats(s);
  EXPECT_EQ(*m.first_tenth_mean, (1.0 + 2.0) / 2);    // ceil(20 / 10) = 2 values
  EXPECT_EQ(*m.last_tenth_mean, (19.0 + 20.0) / 2);
  EXPECT_EQ(*m.median, (10.0 + 11.0) / 2);
  EXPECT_EQ(*m.max, 20.0);
  const MetricStats three = Stats({{1, 5}, {2, 1}, {3, 3}});
  EXPECT_EQ(*three.first_tenth_mean, 5.0);  // ceil(3 / 10) = 1
  EXPECT_EQ(*three.median, 3.0);
  EXPECT_FALSE(Stats({}).median.has_value());
}

TEST(PredictionTest, PlanAndSimulationsAgainstTheRunsMedianStepAndPeak) {
  PlanRecord plan;
  plan.id = 4;
  plan.step_time_s = 2.0;
  plan.result_json = R"({"memory": {"actor": {"total_bytes": 5e10}}})";
  SimulationRecord loop{11, "", "loop", 4, "{}", R"({"step_time_s": 3.0})"};
  SimulationRecord pipe{12, "", "pipeline", 4, "{}", R"({"makespan_us": 1500000.0})"};
  SimulationRecord other{13, "", "loop", 5, "{}", R"({"step_time_s": 9.0})"};
  const PlanPredictions p = PredictionsOf(plan, {loop, pipe, other});
  ASSERT_EQ(p.simulations.size(), 2u);
  const RunData run = MakeRun(1, {1, 2, 3}, {"step_time_s", "peak_memory_bytes"},
                              {{2.5, 2.1, 2.2}, {4e10, 4.5e10, 4.4e10}});
  const auto rows = PredictedVsMeasured(p, run);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].what, "actor step time s");
  EXPECT_EQ(rows[0].predicted, 2.0);
  EXPECT_EQ(*rows[0].measured, 2.2);  // the median of 2.5, 2.1, 2.2
  EXPECT_EQ(rows[1].predicted, 5e10);
  EXPECT_EQ(*rows[1].measured, 4.5e10);
  EXPECT_EQ(rows[2].source, "simulation 11 (loop)");
  EXPECT_EQ(rows[2].predicted, 3.0);
  EXPECT_EQ(rows[3].predicted, 1.5);
}

TEST(ExportTest, RunListAndStepsCsv) {
  RunData a = MakeRun(1, {1, 2}, {"loss", "reward"}, {{3.5, 0.1}, {std::nullopt, 0.25}});
  a.plan_id = 3;
  const RunData b = MakeRun(2, {}, {"loss", "reward"}, {{}, {}});
  EXPECT_EQ(RunListCsv({ListEntry(a), ListEntry(b)}),
            "run_id,kind,model,created_at,steps,last_loss,plan_id,status,planned_steps\n"
            "1,train,m,2026-01-01T00:00:00Z,2,0.1,3,unknown,\n"
            "2,train,m,2026-01-01T00:00:00Z,0,,,unknown,\n");
  EXPECT_EQ(StepsCsv(a), "step,loss,reward\n1,3.5,\n2,0.1,0.25\n");
}

TEST(ExportTest, RunListJsonHasRunsAndTableCounts) {
  const RunData a = MakeRun(1, {1}, {"loss"}, {{2.0}});
  const nlohmann::json j = RunListJson({ListEntry(a)}, {{"plans", 2}, {"runs", 1}});
  EXPECT_EQ(j["runs"][0]["id"], 1);
  EXPECT_EQ(j["runs"][0]["last_loss"], 2.0);
  EXPECT_TRUE(j["runs"][0]["plan_id"].is_null());
  EXPECT_EQ(j["tables"], nlohmann::json({{"plans", 2}, {"runs", 1}}));
}

// A run's status as the store kept it, and a running one whose process is
// gone (RunState): killed without a word, shown as "ended" with its planned
// steps beside those it logged.
TEST(RunStateTest, FromTheStoredStatusAndTheProcess) {
  RunData r = MakeRun(1, {1, 2, 3, 4, 5}, {"loss"}, {{5.0, 4.0, 3.0, 2.0, 1.0}});
  r.run.config_json = "{\"steps\": 200}";
  r.run.status = "running";
  FakeProcessTable processes(100);
  r.run.host = "fake-host";
  r.run.pid = 100;
  r.process = processes.Check({r.run.host, r.run.pid});
  EXPECT_EQ(RunState(r), "running");
  processes.SetAlive(100, false);
  r.process = processes.Check({r.run.host, r.run.pid});
  EXPECT_EQ(RunState(r), "ended");
  const RunListEntry e = ListEntry(r);
  EXPECT_EQ(StepsOf(e), "5 of 200");
  EXPECT_EQ(StatusLine(e), "ended without a word: still marked running, its process is gone (killed?)");
  EXPECT_NE(RenderRunList({e}, {}).find("ended"), std::string::npos);
  r.process = Liveness::kUnknown;  // another host: cannot tell
  EXPECT_EQ(RunState(r), "running");
  r.run.status = "failed";
  r.run.error = "step 3: loss is nan";
  EXPECT_EQ(StatusLine(ListEntry(r)), "failed: step 3: loss is nan");
  EXPECT_EQ(RunListJson({ListEntry(r)}, {})["runs"][0]["error"], "step 3: loss is nan");
  r.run.status = "finished";
  EXPECT_EQ(RunState(r), "finished");
  r.run.status = "";
  EXPECT_EQ(RunState(r), "unknown");
}

}  // namespace
}  // namespace kp
