#include "simulator/gantt.h"

#include <gtest/gtest.h>

#include "schedules/schedule_generators.h"

namespace kp {
namespace {

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The hand-worked 1F1B of pipeline_sim_test.cc, in microseconds: F 1, B 2,
// C 1; makespan 11 us, 1B0 runs [3, 5] on rank 1.
struct Fixture {
  PipelineSchedule schedule = *GenerateSchedule(ScheduleKind::k1F1B, 2, 1, 2);
  PipelineSimResult result =
      *SimulatePipeline(schedule, StageCosts{Nanoseconds(1000), Nanoseconds(2000), Nanoseconds(0), Nanoseconds(1000)});
};

TEST(GanttTest, SvgHasOneLabelledBoxPerActionOnItsRanksRow) {
  Fixture fx;
  const std::string svg = GanttSvg(fx.result, fx.schedule);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(Count(svg, "<rect"), fx.result.timeline.size());
  EXPECT_NE(svg.find(">rank 0</text>"), std::string::npos);
  EXPECT_NE(svg.find(">rank 1</text>"), std::string::npos);
  // 1B0: x = 70 + 3/11 of the 1200 px plot, width 2/11 of it, on row 1
  // (y = 34 + 30), in the full-backward colour, labelled.
  EXPECT_NE(svg.find("<rect x=\"397.27\" y=\"64.00\" width=\"218.18\" height=\"26.00\" fill=\"#f58518\""),
            std::string::npos);
  EXPECT_NE(svg.find(">1B0</text>"), std::string::npos);
  EXPECT_NE(svg.find("<title>rank 1 1B0: 3.00-5.00 us</title>"), std::string::npos);
  // Time axis: ticks every 2 us up to the 11 us makespan.
  EXPECT_NE(svg.find(">10</text>"), std::string::npos);
  EXPECT_EQ(svg.find(">12</text>"), std::string::npos);
  EXPECT_NE(svg.find("time (us)"), std::string::npos);
  EXPECT_NE(svg.find("makespan 11.00 us, bubble 45.45%"), std::string::npos);
}

TEST(GanttTest, LaterStagesOfARankArePaler) {
  auto s = GenerateSchedule(ScheduleKind::kZbv, 2, 1, 4);
  ASSERT_TRUE(s.ok());
  auto r = SimulatePipeline(*s, StageCosts{Nanoseconds(2000), Nanoseconds(2000), Nanoseconds(2000), Nanoseconds(0)});
  ASSERT_TRUE(r.ok());
  const std::string svg = GanttSvg(*r, *s);
  // Half the boxes belong to each rank's second stage (3 on rank 0, 2 on rank 1).
  EXPECT_EQ(Count(svg, "fill-opacity=\"0.55\""), r->timeline.size() / 2);
  EXPECT_NE(svg.find("fill=\"#72b7b2\""), std::string::npos);  // I
  EXPECT_NE(svg.find("fill=\"#54a24b\""), std::string::npos);  // W
}

TEST(GanttTest, HtmlIsSelfContained) {
  Fixture fx;
  const std::string html = GanttHtml(fx.result, fx.schedule);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("<title>1f1b pipeline schedule</title>"), std::string::npos);
  EXPECT_NE(html.find(GanttSvg(fx.result, fx.schedule)), std::string::npos);
  // Nothing to fetch: the only URL is the SVG namespace.
  EXPECT_EQ(Count(html, "http"), 1u);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
}

}  // namespace
}  // namespace kp
