#include "report/compare.h"

#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>

#include "common/table.h"
#include "report/test_util.h"

namespace kp {
namespace {

using testing::LossRun;

// The change as the test computes it, independently of ChangeText: the
// relative change in percent, rounded to two decimals by printf, with a sign.
std::string Percent(double value, double reference) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%+.2f%%", (value / reference - 1.0) * 100.0);
  return buf;
}

TEST(ChangeTextTest, BitwiseEqualIsIdentical) {
  EXPECT_EQ(ChangeText(8.003520, 8.003520), "identical");
  EXPECT_EQ(ChangeText(0.0, 0.0), "identical");
  // Equal under == but not bitwise.
  EXPECT_NE(ChangeText(-0.0, 0.0), "identical");
  // One ulp apart is a change, printed as +0.00%.
  EXPECT_EQ(ChangeText(std::nextafter(2.2337, 3.0), 2.2337), "+0.00%");
}

TEST(ChangeTextTest, ReproducesTheSeedTablesCells) {
  // Cells of seed 003's first table (grad norm and loss against dp1).
  EXPECT_EQ(ChangeText(1.3904, 1.3804), "+0.72%");
  EXPECT_EQ(ChangeText(3.484850, 3.488880), "-0.12%");
  EXPECT_EQ(ChangeText(0.6719, 0.6772), "-0.78%");
  EXPECT_EQ(ChangeText(2.2338, 2.2337), "+0.00%");
  EXPECT_EQ(ChangeText(3.405530, 3.405580), "-0.00%");
}

TEST(ChangeTextTest, ZeroReferenceIsNotAPercentage) { EXPECT_EQ(ChangeText(1.0, 0.0), "n/a"); }

TEST(ParseStepsTest, AcceptsACommaList) {
  auto s = ParseSteps("1,10,50,100");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::vector<int>{1, 10, 50, 100}));
}

TEST(ParseStepsTest, RefusesMalformedListsNamingTheFlag) {
  for (const char* bad : {"", "1,x", "0", "1,,2", "1,", "-1", "1.5", "1,1", " 1", "99999999999"}) {
    auto s = ParseSteps(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_EQ(s.status().message().rfind("--steps: ", 0), 0u) << s.status().message();
  }
}

TEST(ParseMetricsTest, RefusesEmptyNamesAndDuplicates) {
  EXPECT_EQ(*ParseMetrics("loss,grad_norm"), (std::vector<std::string>{"loss", "grad_norm"}));
  for (const char* bad : {"", "loss,", "loss,,grad_norm", "loss,loss"}) {
    auto m = ParseMetrics(bad);
    ASSERT_FALSE(m.ok()) << bad;
    EXPECT_EQ(m.status().message().rfind("--metric: ", 0), 0u) << m.status().message();
  }
}

// A reference, a run bitwise equal to it, and a run that departs after step 1.
struct ThreeRuns {
  RunData ref = LossRun(1, {1, 2, 3, 4}, {8.003520, 5.5, 3.488880, 2.5}, {2.2337, 1.9, 1.3804, 0.8});
  RunData same = LossRun(2, {1, 2, 3, 4}, {8.003520, 5.5, 3.488880, 2.5}, {2.2337, 1.9, 1.3804, 0.8});
  RunData other = LossRun(3, {1, 2, 3}, {8.003520, 5.4, 3.484850, }, {2.2337, 1.95, 1.3904});
};

TEST(CompareTest, IdenticalAndPercentCellsOnHandMadeSeries) {
  ThreeRuns t;
  auto c = Compare(t.ref, {t.same, t.other}, {"loss", "grad_norm"}, {1, 3, 4});
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(c->rows.size(), 3u);
  EXPECT_TRUE(c->rows[0].is_reference);
  ASSERT_EQ(c->rows[1].cells.size(), 6u);  // 2 metrics x 3 steps, metric-major
  for (const CompareCell& cell : c->rows[1].cells) EXPECT_EQ(cell.change, "identical") << cell.metric << cell.step;
  const auto& o = c->rows[2].cells;
  EXPECT_EQ(o[0].metric, "loss");
  EXPECT_EQ(o[0].step, 1);
  EXPECT_EQ(o[0].change, "identical");
  EXPECT_EQ(o[1].change, Percent(3.484850, 3.488880));
  EXPECT_EQ(o[1].change, "-0.12%");
  EXPECT_FALSE(o[2].value.has_value());  // run 3 stops at step 3
  EXPECT_EQ(o[2].change, "-");
  EXPECT_EQ(o[3].metric, "grad_norm");
  EXPECT_EQ(o[3].change, "identical");
  EXPECT_EQ(o[4].change, Percent(1.3904, 1.3804));
  EXPECT_EQ(*o[4].value, 1.3904);
  EXPECT_EQ(*o[4].reference, 1.3804);
}

TEST(CompareTest, DefaultStepsAreTheSeedsThatExistAndTheLast) {
  std::vector<int> steps;
  std::vector<double> v;
  for (int s = 1; s <= 60; ++s) {
    steps.push_back(s);
    v.push_back(1.0 / s);
  }
  EXPECT_EQ(DefaultSteps(LossRun(1, steps, v, v)), (std::vector<int>{1, 10, 50, 60}));
  EXPECT_EQ(DefaultSteps(LossRun(1, {1, 2, 3}, {1, 2, 3}, {1, 2, 3})), (std::vector<int>{1, 3}));
}

TEST(CompareTest, UnknownMetricNamesTheFlagAndTheColumns) {
  ThreeRuns t;
  auto c = Compare(t.ref, {t.other}, {"reward"}, {1});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "--metric: no metric \"reward\" in the steps table (it has loss, grad_norm)");
}

TEST(CompareTest, RendersValuesWithChangesBeneath) {
  ThreeRuns t;
  auto c = Compare(t.ref, {t.other}, {"loss", "grad_norm"}, {1, 3});
  ASSERT_TRUE(c.ok());
  // Numbers right-aligned, text ("identical") left-aligned, as common/table.h renders.
  EXPECT_EQ(RenderComparison(*c),
            "run                   loss, step 1  step 3    grad norm, step 1  step 3\n"
            "-----------------------------------------------------------------------\n"
            "run 1 (m), reference      8.003520  3.488880             2.2337  1.3804\n"
            "run 3 (m)                 8.003520  3.484850             2.2337  1.3904\n"
            "                      identical       -0.12%  identical          +0.72%\n");
}

TEST(CompareTest, CsvHasOneLinePerCellWithExactValues) {
  ThreeRuns t;
  auto c = Compare(t.ref, {t.other}, {"loss"}, {3, 4});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(ComparisonCsv(*c),
            "run_id,label,reference,metric,step,value,reference_value,change\n"
            "1,\"run 1 (m)\",1,loss,3,3.48888,3.48888,\n"
            "1,\"run 1 (m)\",1,loss,4,2.5,2.5,\n"
            "3,\"run 3 (m)\",0,loss,3,3.48485,3.48888,-0.12%\n"
            "3,\"run 3 (m)\",0,loss,4,,2.5,-\n");
  // The shortest form reads back to the same double.
  EXPECT_EQ(std::stod(FormatShortest(3.48485)), 3.48485);
}

TEST(CompareTest, JsonHoldsEveryCell) {
  ThreeRuns t;
  auto c = Compare(t.ref, {t.other}, {"grad_norm"}, {3, 4});
  ASSERT_TRUE(c.ok());
  const nlohmann::json j = ComparisonJson(*c);
  EXPECT_EQ(j["reference"], 1);
  EXPECT_EQ(j["steps"], nlohmann::json({3, 4}));
  ASSERT_EQ(j["rows"].size(), 2u);
  const auto& cell = j["rows"][1]["cells"][0];
  EXPECT_EQ(cell["metric"], "grad_norm");
  EXPECT_EQ(cell["step"], 3);
  EXPECT_EQ(cell["value"].get<double>(), 1.3904);
  EXPECT_EQ(cell["reference_value"].get<double>(), 1.3804);
  EXPECT_EQ(cell["change"], "+0.72%");
  EXPECT_TRUE(j["rows"][1]["cells"][1]["value"].is_null());
}

}  // namespace
}  // namespace kp
