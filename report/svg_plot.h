// Inline SVG pictures for the HTML report: line plots of metrics over steps
// and horizontal stacked bars. Every number is printed with two decimals so
// the output is byte-stable; no script, no external resource.
//
// Thread-safety: pure functions.
#ifndef KIMI_PLAN_REPORT_SVG_PLOT_H_
#define KIMI_PLAN_REPORT_SVG_PLOT_H_

#include <functional>
#include <string>

#include "common/xml.h"
#include <utility>
#include <vector>

namespace kp {

/// One curve: (x, y) points in x order.
struct PlotSeries {
  std::string label;
  std::vector<std::pair<double, double>> points;
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

/// The polyline's `points` attribute: for each (x, y),
/// "X,Y" with X = left + (x - x.lo) / (x.hi - x.lo) * width and
/// Y = top + height - (y - y.lo) / (y.hi - y.lo) * height, two decimals,
/// space separated.
std::string PolylinePoints(const PlotSeries& s, const PlotArea& area, AxisRange x, AxisRange y);

/// A standalone <svg> line plot: x and y ranges are RangeOf all series'
/// values, the default PlotArea, one <polyline> per series (colours in
/// order), five y ticks and up to ten x ticks, a legend. No series or no
/// points: a picture that says "no data".
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

/// Horizontal bars, one per row, each stacked from its segments, scaled so
/// the longest total fills 600 units; the total printed by `format` right
/// of the bar; a legend of the first bar's segment labels.
std::string StackedBarsSvg(const std::string& title, const std::vector<Bar>& bars,
                           const std::function<std::string(double)>& format);

/// The i-th colour of the palette the plots use.
const char* PlotColour(size_t i);

}  // namespace kp

#endif  // KIMI_PLAN_REPORT_SVG_PLOT_H_
