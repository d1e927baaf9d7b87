#include "report/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/table.h"
#include "common/xml.h"

namespace kp {

namespace {

std::string Num(double v) { return FormatFixed(v, 2); }

// Tick labels: up to four significant digits, no trailing zeros.
std::string Tick(double v) { return FormatSignificant(v, 4); }

std::string Text(double x, double y, const std::string& text, const std::string& extra = "") {
  return "<text x=\"" + Num(x) + "\" y=\"" + Num(y) + "\"" + extra + ">" + EscapeXml(text) + "</text>\n";
}

std::string Line(double x1, double y1, double x2, double y2, const char* stroke) {
  return "<line x1=\"" + Num(x1) + "\" y1=\"" + Num(y1) + "\" x2=\"" + Num(x2) + "\" y2=\"" + Num(y2) +
         "\" stroke=\"" + stroke + "\"/>\n";
}

std::string Open(double width, double height) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Num(width) + "\" height=\"" + Num(height) +
         "\" viewBox=\"0 0 " + Num(width) + " " + Num(height) + "\">\n"
         "<style>text{font-family:sans-serif;font-size:11px;fill:#333}</style>\n"
         "<rect x=\"0\" y=\"0\" width=\"" + Num(width) + "\" height=\"" + Num(height) + "\" fill=\"#ffffff\"/>\n";
}

double MapX(double x, const PlotArea& a, AxisRange r) { return a.left + (x - r.lo) / (r.hi - r.lo) * a.width; }
double MapY(double y, const PlotArea& a, AxisRange r) { return a.top + a.height - (y - r.lo) / (r.hi - r.lo) * a.height; }

// Steps are integers: ticks at whole numbers, at most ten of them.
std::string XTicks(const PlotArea& a, AxisRange r) {
  const double span = r.hi - r.lo;
  const double step = std::max(1.0, std::ceil(span / 10));
  std::string out;
  for (double x = std::ceil(r.lo); x <= r.hi + 1e-9; x += step) {
    const double px = MapX(x, a, r), y = a.top + a.height;
    out += Line(px, y, px, y + 4, "#333") + Text(px, y + 16, Tick(x), " text-anchor=\"middle\"");
  }
  return out;
}

std::string YTicks(const PlotArea& a, AxisRange r) {
  std::string out;
  for (int i = 0; i <= 4; ++i) {
    const double v = r.lo + (r.hi - r.lo) * i / 4, py = MapY(v, a, r);
    out += Line(a.left, py, a.left + a.width, py, "#e5e5e5") + Text(a.left - 6, py + 4, Tick(v), " text-anchor=\"end\"");
  }
  return out;
}

std::string Legend(const std::vector<std::string>& labels, double x, double y) {
  std::string out;
  for (size_t i = 0; i < labels.size(); ++i) {
    const double ly = y + 18 * static_cast<double>(i);
    out += "<rect x=\"" + Num(x) + "\" y=\"" + Num(ly - 9) + "\" width=\"12\" height=\"10\" fill=\"" +
           PlotColour(i) + "\"/>\n" + Text(x + 18, ly, labels[i]);
  }
  return out;
}

}  // namespace

const char* PlotColour(size_t i) {
  static const char* const kPalette[] = {"#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2",
                                         "#b279a2", "#eeca3b", "#9d755d", "#ff9da6", "#bab0ac"};
  return kPalette[i % (sizeof kPalette / sizeof kPalette[0])];
}

AxisRange RangeOf(const std::vector<double>& values) {
  if (values.empty()) return {0, 1};
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  if (*lo == *hi) return {*lo - 0.5, *hi + 0.5};
  return {*lo, *hi};
}

std::string PolylinePoints(const PlotSeries& s, const PlotArea& area, AxisRange x, AxisRange y) {
  std::string out;
  for (const auto& [px, py] : s.points)
    out += (out.empty() ? "" : " ") + Num(MapX(px, area, x)) + "," + Num(MapY(py, area, y));
  return out;
}

std::string LinePlotSvg(const std::string& title, const std::string& x_label, const std::string& y_label,
                        const std::vector<PlotSeries>& series) {
  std::vector<double> xs, ys;
  std::vector<std::string> labels;
  for (const PlotSeries& s : series) {
    labels.push_back(s.label);
    for (const auto& [x, y] : s.points) {
      xs.push_back(x);
      ys.push_back(y);
    }
  }
  const PlotArea a;
  std::string out = Open(kLinePlotWidth, kLinePlotHeight) + Text(a.left, 18, title, " font-weight=\"bold\"");
  if (xs.empty()) return out + Text(a.left, a.top + a.height / 2, "no data") + "</svg>\n";
  const AxisRange xr = RangeOf(xs), yr = RangeOf(ys);
  out += YTicks(a, yr) + XTicks(a, xr);
  out += Line(a.left, a.top + a.height, a.left + a.width, a.top + a.height, "#333") +
         Line(a.left, a.top, a.left, a.top + a.height, "#333");
  out += Text(a.left + a.width / 2, kLinePlotHeight - 6, x_label, " text-anchor=\"middle\"");
  out += Text(14, a.top + a.height / 2, y_label,
              " text-anchor=\"middle\" transform=\"rotate(-90 14 " + Num(a.top + a.height / 2) + ")\"");
  for (size_t i = 0; i < series.size(); ++i)
    out += "<polyline fill=\"none\" stroke=\"" + std::string(PlotColour(i)) + "\" stroke-width=\"1.5\" points=\"" +
           PolylinePoints(series[i], a, xr, yr) + "\"/>\n";
  return out + Legend(labels, a.left + a.width + 20, a.top + 10) + "</svg>\n";
}

std::string StackedBarsSvg(const std::string& title, const std::vector<Bar>& bars,
                           const std::function<std::string(double)>& format) {
  constexpr double kLabel = 230, kBarArea = 600, kRow = 22, kGap = 8, kTop = 52, kRight = 110;
  double longest = 0;
  for (const Bar& b : bars) {
    double total = 0;
    for (const BarSegment& s : b.segments) total += s.value;
    longest = std::max(longest, total);
  }
  const double height = kTop + static_cast<double>(bars.size()) * (kRow + kGap) + 10;
  std::string out = Open(kLabel + kBarArea + kRight, height) + Text(10, 18, title, " font-weight=\"bold\"");
  std::vector<std::string> legend;
  if (!bars.empty())
    for (const BarSegment& s : bars.front().segments) legend.push_back(s.label);
  for (size_t i = 0; i < legend.size(); ++i)
    out += "<rect x=\"" + Num(kLabel + 110 * static_cast<double>(i)) + "\" y=\"28\" width=\"12\" height=\"10\" fill=\"" +
           PlotColour(i) + "\"/>\n" + Text(kLabel + 110 * static_cast<double>(i) + 16, 37, legend[i]);
  const double scale = longest > 0 ? kBarArea / longest : 0;
  for (size_t r = 0; r < bars.size(); ++r) {
    const double y = kTop + static_cast<double>(r) * (kRow + kGap);
    double x = kLabel, total = 0;
    out += Text(kLabel - 8, y + kRow / 2 + 4, bars[r].label, " text-anchor=\"end\"");
    for (size_t i = 0; i < bars[r].segments.size(); ++i) {
      const BarSegment& s = bars[r].segments[i];
      out += "<rect x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" width=\"" + Num(s.value * scale) + "\" height=\"" +
             Num(kRow) + "\" fill=\"" + PlotColour(i) + "\"><title>" + EscapeXml(s.label + ": " + format(s.value)) +
             "</title></rect>\n";
      x += s.value * scale;
      total += s.value;
    }
    out += Text(x + 6, y + kRow / 2 + 4, format(total));
  }
  return out + "</svg>\n";
}

}  // namespace kp
