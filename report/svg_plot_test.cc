#include "report/svg_plot.h"

#include <gtest/gtest.h>

#include "report/html_report.h"
#include "report/test_util.h"

namespace kp {
namespace {

TEST(SvgPlotTest, PolylinePointsMapDataToTheArea) {
  // x in [1, 3] onto [70, 730], y in [4, 8] onto [270, 30] (y grows down):
  // (1, 8) -> (70, 30); (2, 6) -> (70 + 330, 30 + 120); (3, 4) -> (730, 270).
  const PlotSeries s{"a", {{1, 8}, {2, 6}, {3, 4}}};
  EXPECT_EQ(PolylinePoints(s, PlotArea{}, {1, 3}, {4, 8}), "70.00,30.00 400.00,150.00 730.00,270.00");
  // Another area: left 10, top 20, 100 x 50; x in [0, 4], y in [0, 2].
  const PlotSeries t{"b", {{0, 0}, {1, 0.5}, {4, 2}}};
  EXPECT_EQ(PolylinePoints(t, PlotArea{10, 20, 100, 50}, {0, 4}, {0, 2}), "10.00,70.00 35.00,57.50 110.00,20.00");
}

TEST(SvgPlotTest, LinePlotDrawsEachSeriesOverTheRangeOfAll) {
  // Two series: x spans [1, 5], y spans [2, 10]. Series a: (1, 10) ->
  // (70, 30); (5, 2) -> (730, 270). Series b: (3, 6) -> (70 + 2/4*660,
  // 30 + 240 - 4/8*240) = (400, 150).
  const std::string svg = LinePlotSvg("loss", "step", "loss", {{"a", {{1, 10}, {5, 2}}}, {"b", {{3, 6}}}});
  EXPECT_NE(svg.find("stroke=\"#4c78a8\" stroke-width=\"1.5\" points=\"70.00,30.00 730.00,270.00\""), std::string::npos)
      << svg;
  EXPECT_NE(svg.find("stroke=\"#f58518\" stroke-width=\"1.5\" points=\"400.00,150.00\""), std::string::npos);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"900.00\" height=\"320.00\"", 0), 0u);
}

// Round ticks: 1, 2 or 5 times a power of ten, the axis widened to them.
TEST(SvgPlotTest, TicksAreRound) {
  EXPECT_EQ(TickStep(8.176 - 5.393, 5, false), 1.0);  // 2.783 in at most 5 parts: 0.5 gives 6
  EXPECT_EQ(TickStep(0.8, 5, false), 0.2);
  EXPECT_EQ(TickStep(59, 10, true), 10.0);
  EXPECT_EQ(TickStep(4, 10, true), 1.0);  // 0.5 would do, but steps are whole
  EXPECT_EQ(TickStep(2.4e6, 5, false), 5e5);
  EXPECT_EQ(TickStep(0, 5, false), 1.0);
  const AxisRange r = TickRange({5.393, 8.176}, 1.0);
  EXPECT_EQ(r.lo, 5.0);
  EXPECT_EQ(r.hi, 9.0);
  const AxisRange on = TickRange({0.2, 0.6}, 0.2);  // ends already on ticks stay
  EXPECT_NEAR(on.lo, 0.2, 1e-15);
  EXPECT_NEAR(on.hi, 0.6, 1e-15);
  const std::string svg = LinePlotSvg("t", "step", "y", {{"a", {{1, 8.176}, {30, 6.784}, {60, 5.393}}}});
  for (const char* tick : {">5<", ">6<", ">7<", ">8<", ">9<", ">0<", ">10<", ">60<"})
    EXPECT_NE(svg.find(tick), std::string::npos) << tick;
  EXPECT_EQ(svg.find("8.176"), std::string::npos);
}

TEST(SvgPlotTest, RangeOfASingleValueIsWidened) {
  const AxisRange r = RangeOf({3, 3});
  EXPECT_EQ(r.lo, 2.5);
  EXPECT_EQ(r.hi, 3.5);
  EXPECT_NE(LinePlotSvg("t", "x", "y", {}).find("no data"), std::string::npos);
}

TEST(SvgPlotTest, StackedBarsScaleTheLongestTo600) {
  // Totals 30 and 60: the longest fills 600 units, so 10 is 100 wide.
  const std::string svg = StackedBarsSvg("m", {{"actor", {{"w", 10}, {"g", 20}}}, {"rollout", {{"w", 60}, {"g", 0}}}},
                                         [](double v) { return std::to_string(static_cast<int>(v)); });
  EXPECT_NE(svg.find("<rect x=\"230.00\" y=\"52.00\" width=\"100.00\" height=\"22.00\""), std::string::npos) << svg;
  EXPECT_NE(svg.find("<rect x=\"330.00\" y=\"52.00\" width=\"200.00\""), std::string::npos);
  EXPECT_NE(svg.find("<rect x=\"230.00\" y=\"82.00\" width=\"600.00\""), std::string::npos);
  // A capacity beyond the bars sets the scale: 120 fills 600, so 60 is 300
  // wide and the mark stands at 230 + 600.
  const std::string marked = StackedBarsSvg("m", {{"rollout", {{"w", 60}}}}, [](double v) { return std::to_string(v); },
                                            BarMark{120, "h200: 120 GB"});
  EXPECT_NE(marked.find("width=\"300.00\""), std::string::npos) << marked;
  EXPECT_NE(marked.find("<line x1=\"830.00\""), std::string::npos) << marked;
  EXPECT_NE(marked.find(">h200: 120 GB<"), std::string::npos);
}

TEST(HtmlReportTest, MemoryBarsFromAPlansJson) {
  PlanRecord plan;
  plan.id = 2;
  plan.result_json = R"({"memory": {"actor": {"weights_bytes": 1, "grads_bytes": 2, "optimizer_bytes": 3,
                        "activations_bytes": 4, "other_bytes": 5}, "rollout": {"weights_bytes": 6}}})";
  auto bars = MemoryBars(plan);
  ASSERT_TRUE(bars.ok());
  ASSERT_EQ(bars->size(), 2u);
  EXPECT_EQ((*bars)[0].label, "actor");
  std::vector<double> actor;
  for (const BarSegment& s : (*bars)[0].segments) actor.push_back(s.value);
  EXPECT_EQ(actor, (std::vector<double>{1, 2, 3, 4, 5}));
  EXPECT_EQ((*bars)[1].segments[0].value, 6);
  plan.result_json = "{}";
  EXPECT_EQ(MemoryBars(plan).status().message(), "--plan: plan 2 has no memory breakdown");
}

TEST(HtmlReportTest, RedrawsAPipelineSimulationFromItsRequest) {
  // 1f1b, pp 2, 2 micro-batches, F 1 B 2 W 0, C 1: 11 us, as the simulate test pins.
  SimulationRecord sim{5, "", "pipeline", 0,
                       R"({"schedule": "1f1b", "pp": 2, "vp": 1, "microbatches": 2, "f_us": 1, "b_us": 2, "w_us": 0,
                           "p2p_us": 1, "schedule_csv": null})",
                       R"({"makespan_us": 11})"};
  auto g = PipelineGantt(sim);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->caption, "simulation 5 redrawn from its request: makespan 11.0 us");
  EXPECT_NE(g->svg.find("rank 1"), std::string::npos);
  sim.request_json = R"({"schedule": "1f1b", "schedule_csv": "a.csv"})";
  EXPECT_FALSE(PipelineGantt(sim).ok());
}

TEST(HtmlReportTest, OnePageWithoutScriptsOrExternalResources) {
  HtmlReportInput in;
  in.title = "kimi-plan report: a<b.db";
  in.runs = {testing::LossRun(1, {1, 2}, {3, 2}, {1, 0.5})};
  in.syncs = {{3, "", "sync", 0, "{}", R"({"model": "k", "mode": "full", "tcp_s": 95.2, "rdma_s": 1.49})"}};
  auto page = HtmlReport(in);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page->find("<h1>kimi-plan report: a&lt;b.db</h1>"), std::string::npos);
  EXPECT_EQ(page->find("<script"), std::string::npos);
  EXPECT_EQ(page->find("src="), std::string::npos);
  EXPECT_EQ(page->find("href="), std::string::npos);
  EXPECT_EQ(page->find("reward"), std::string::npos);  // no run logs one
  EXPECT_NE(page->find("#3 k full, RDMA"), std::string::npos);
  EXPECT_NE(page->find("95.20 s"), std::string::npos);
}

}  // namespace
}  // namespace kp
