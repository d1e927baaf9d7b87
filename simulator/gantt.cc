#include "simulator/gantt.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "common/table.h"
#include "common/xml.h"

namespace kp {

namespace {

constexpr double kLeft = 70, kTop = 34, kRow = 26, kGap = 4, kPlotWidth = 1200, kAxis = 34, kRight = 20;

std::string Num(double v) { return FormatFixed(v, 2); }

// Tick labels: up to four significant digits, no trailing zeros.
std::string Tick(double v) { return FormatSignificant(v, 4); }

const char* Fill(ActionType t) {
  switch (t) {
    case ActionType::kForward: return "#4c78a8";
    case ActionType::kBackwardInput: return "#72b7b2";
    case ActionType::kBackwardWeight: return "#54a24b";
    case ActionType::kFullBackward: return "#f58518";
    default: return "#999999";
  }
}

// Which of its rank's stages a stage is (0 for the first), for shading.
std::vector<int> LocalStageIndex(const PipelineSchedule& s) {
  std::vector<int> local(s.num_stages, 0), seen(s.pp, 0);
  for (int st = 0; st < s.num_stages && st < static_cast<int>(s.stage_to_rank.size()); ++st)
    local[st] = seen[s.stage_to_rank[st]]++;
  return local;
}

// A tick spacing of 1, 2 or 5 times a power of ten giving at most ten ticks.
double TickStep(double span) {
  if (span <= 0) return 1;
  const double raw = span / 10, mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double k : {1.0, 2.0, 5.0, 10.0})
    if (k * mag >= raw) return k * mag;
  return 10 * mag;
}

std::string Box(const TimelineEntry& e, double scale, const std::vector<int>& local) {
  const double x = kLeft + e.start.value() * scale, w = (e.end - e.start).value() * scale;
  const double y = kTop + e.rank * (kRow + kGap);
  const std::string label = e.action.ToString();
  const bool pale = e.action.stage < static_cast<int>(local.size()) && local[e.action.stage] > 0;
  std::string out = "<g><title>rank " + std::to_string(e.rank) + " " + label + ": " +
                    Num(e.start.value() / 1e3) + "-" + Num(e.end.value() / 1e3) + " us</title>";
  out += "<rect x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" width=\"" + Num(w) + "\" height=\"" + Num(kRow) +
         "\" fill=\"" + Fill(e.action.type) + "\"" + (pale ? " fill-opacity=\"0.55\"" : "") +
         " stroke=\"#ffffff\" stroke-width=\"0.5\"/>";
  if (w >= 7.0 * label.size())
    out += "<text x=\"" + Num(x + w / 2) + "\" y=\"" + Num(y + kRow / 2 + 4) + "\" class=\"l\">" + label + "</text>";
  return out + "</g>\n";
}

std::string Axis(double makespan_us, double scale_us, double y) {
  std::string out = "<line x1=\"" + Num(kLeft) + "\" y1=\"" + Num(y) + "\" x2=\"" + Num(kLeft + kPlotWidth) +
                    "\" y2=\"" + Num(y) + "\" stroke=\"#333\"/>\n";
  const double step = TickStep(makespan_us);
  for (int i = 0; i * step <= makespan_us * (1 + 1e-9); ++i) {
    const double x = kLeft + i * step * scale_us;
    out += "<line x1=\"" + Num(x) + "\" y1=\"" + Num(y) + "\" x2=\"" + Num(x) + "\" y2=\"" + Num(y + 5) +
           "\" stroke=\"#333\"/><text x=\"" + Num(x) + "\" y=\"" + Num(y + 17) + "\" class=\"t\">" +
           Tick(i * step) + "</text>\n";
  }
  return out + "<text x=\"" + Num(kLeft + kPlotWidth) + "\" y=\"" + Num(y + 30) +
         "\" class=\"t\" text-anchor=\"end\">time (us)</text>\n";
}

}  // namespace

std::string GanttSvg(const PipelineSimResult& result, const PipelineSchedule& schedule) {
  const int pp = schedule.pp;
  const double height = kTop + pp * (kRow + kGap) + kAxis + 8;
  const double width = kLeft + kPlotWidth + kRight;
  const double makespan = static_cast<double>(result.makespan.value());
  const double scale = makespan > 0 ? kPlotWidth / makespan : 0;  // px per ns
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Num(width) + "\" height=\"" +
                    Num(height) + "\" viewBox=\"0 0 " + Num(width) + " " + Num(height) + "\">\n";
  out += "<style>text{font-family:sans-serif;font-size:11px}.l{text-anchor:middle;fill:#fff}"
         ".t{text-anchor:middle;fill:#333}.r{text-anchor:end;fill:#333}</style>\n";
  out += "<text x=\"" + Num(kLeft) + "\" y=\"20\">" + EscapeXml(schedule.name) + ": pp " + std::to_string(pp) + ", " +
         std::to_string(schedule.num_stages) + " stages, " + std::to_string(schedule.microbatches) +
         " micro-batches; makespan " + Num(makespan / 1e3) + " us, bubble " +
         Num(100 * result.bubble_fraction) + "%</text>\n";
  for (int r = 0; r < pp; ++r)
    out += "<text x=\"" + Num(kLeft - 8) + "\" y=\"" + Num(kTop + r * (kRow + kGap) + kRow / 2 + 4) +
           "\" class=\"r\">rank " + std::to_string(r) + "</text>\n";
  const std::vector<int> local = LocalStageIndex(schedule);
  for (const TimelineEntry& e : result.timeline) out += Box(e, scale, local);
  out += Axis(makespan / 1e3, scale * 1e3, kTop + pp * (kRow + kGap) + 2);
  return out + "</svg>\n";
}

std::string GanttHtml(const PipelineSimResult& result, const PipelineSchedule& schedule) {
  const std::string title = EscapeXml(schedule.name) + " pipeline schedule";
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + title +
                    "</title>\n<style>body{font-family:sans-serif;margin:24px}svg{max-width:100%;height:auto}"
                    "</style>\n</head>\n<body>\n<h1>" + title + "</h1>\n";
  out += "<p>Makespan " + Num(result.makespan.value() / 1e3) + " us; bubble " + Num(100 * result.bubble_fraction) +
         "%; " + std::to_string(result.events) +
         " events. F forward, I input gradient, W weight gradient, B full backward; paler boxes are a rank's "
         "later stages.</p>\n";
  return out + GanttSvg(result, schedule) + "</body>\n</html>\n";
}

}  // namespace kp
