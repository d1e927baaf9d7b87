#include "store/store.h"

#include <sqlite3.h>

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

// A version-1 file (plans only) is migrated to the current schema on open,
// keeping its rows.
TEST(StoreTest, MigratesAVersionOneFile) {
  const std::string path = ::testing::TempDir() + "/v1.db";
  std::remove(path.c_str());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const char* v1 =
      "CREATE TABLE plans (id INTEGER PRIMARY KEY AUTOINCREMENT, created_at TEXT NOT NULL, model TEXT NOT NULL,"
      " gpu TEXT NOT NULL, world INTEGER NOT NULL CHECK (world > 0), preset TEXT, feasible INTEGER NOT NULL"
      " CHECK (feasible IN (0, 1)), step_time_s REAL NOT NULL, request_json TEXT NOT NULL, result_json TEXT NOT NULL);"
      "INSERT INTO plans VALUES (1, 't', 'm', 'g', 8, NULL, 1, 1.0, '{}', '{}');"
      "PRAGMA user_version = 1;";
  ASSERT_EQ(sqlite3_exec(db, v1, nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  FakeClock clock;
  auto s = Store::Open(path, clock);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ((*s)->SchemaVersion(), Store::kSchemaVersion);
  EXPECT_EQ((*s)->ListPlans()->size(), 1u);
  EXPECT_TRUE((*s)->ListSimulations()->empty());
}

}  // namespace
}  // namespace kp
