// Inline SVG pictures for the HTML report: line plots of metrics over steps
// and horizontal stacked bars. Every number is printed with two decimals so
// the output is byte-stable; no script, no external resource.
//
// Thread-safety: pure functions.
#ifndef KIMI_PLAN_REPORT_SVG_PLOT_H_
#define KIMI_PLAN_REPORT_SVG_PLOT_H_

#include <functional>
#include <optional>
#include <string>

#include "common/xml.h"
#include <utility>
#include <vector>

namespace kp {

/// One curve: (x, y) points in x order.
struct PlotSeries {
  std::string label;
  std::vector<std::pair<double, double>> points;
  bool dashed = false;  ///< a prediction drawn beside measurements
};

/// Where the data is drawn inside the picture, in SVG user units; y grows down.
struct PlotArea {
  double left = 70, top = 30, width = 660, height = 240;
};

/// A closed interval an axis spans.
struct AxisRange {
  double lo = 0, hi = 1;
};

/// The line plot's picture size and data area: a 900 x 320 picture, the
/// default PlotArea, the legend right of it.
constexpr double kLinePlotWidth = 900, kLinePlotHeight = 320;

/// [min, max] of `values`; an empty list gives [0, 1] and a single value v
/// gives [v - 0.5, v + 0.5], so that every point maps inside the area.
AxisRange RangeOf(const std::vector<double>& values);

/// The distance between an axis's ticks: the smallest of 1, 2 or 5 times a
/// power of ten that splits `span` into at most `intervals` parts; at least
/// 1 when `integer` (steps). A span of 0 gives 1.
double TickStep(double span, int intervals, bool integer);
/// `r` widened to whole multiples of `step`, so that the axis starts and
/// ends on a tick.
AxisRange TickRange(AxisRange r, double step);

/// The polyline's `points` attribute: for each (x, y),
/// "X,Y" with X = left + (x - x.lo) / (x.hi - x.lo) * width and
/// Y = top + height - (y - y.lo) / (y.hi - y.lo) * height, two decimals,
/// space separated.
std::string PolylinePoints(const PlotSeries& s, const PlotArea& area, AxisRange x, AxisRange y);

/// A standalone <svg> line plot: x and y ranges are RangeOf all series'
/// values widened to round ticks (TickStep: at most 5 intervals on y, 10
/// on x, whole steps), the default PlotArea, one <polyline> per series
/// (colours in order, dashed where the series says), a legend. No series
/// or no points: a picture that says "no data".
std::string LinePlotSvg(const std::string& title, const std::string& x_label, const std::string& y_label,
                        const std::vector<PlotSeries>& series);

struct BarSegment {
  std::string label;  ///< the legend entry, shared by the segments of the same index
  double value = 0;
};

struct Bar {
  std::string label;
  std::vector<BarSegment> segments;
};

/// A vertical line across the bars at `value` (a GPU's capacity), labelled.
struct BarMark {
  double value = 0;
  std::string label;
};

/// Horizontal bars, one per row, each stacked from its segments, scaled so
/// the longest total (or the mark, when further) fills 600 units; the total
/// printed by `format` right of the bar; a legend of the first bar's
/// segment labels; the mark as a dashed red line with its label above.
std::string StackedBarsSvg(const std::string& title, const std::vector<Bar>& bars,
                           const std::function<std::string(double)>& format,
                           const std::optional<BarMark>& mark = std::nullopt);

/// The i-th colour of the palette the plots use.
const char* PlotColour(size_t i);

}  // namespace kp

#endif  // KIMI_PLAN_REPORT_SVG_PLOT_H_
