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

// The ticks of a range TickRange made: lo, lo + step, ..., hi, each
// computed from its index so that no rounding accumulates.
std::vector<double> Ticks(AxisRange r, double step) {
  std::vector<double> out;
  const long long n = std::llround((r.hi - r.lo) / step);
  for (long long i = 0; i <= n; ++i) out.push_back(r.lo + static_cast<double>(i) * step);
  return out;
}

std::string XTicks(const PlotArea& a, AxisRange r, double step) {
  std::string out;
  for (double x : Ticks(r, step)) {
    const double px = MapX(x, a, r), y = a.top + a.height;
    out += Line(px, y, px, y + 4, "#333") + Text(px, y + 16, Tick(x), " text-anchor=\"middle\"");
  }
  return out;
}

std::string YTicks(const PlotArea& a, AxisRange r, double step) {
  std::string out;
  for (double v : Ticks(r, step)) {
    const double py = MapY(v, a, r);
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

double TickStep(double span, int intervals, bool integer) {
  if (!(span > 0) || intervals <= 0) return 1;
  const double raw = span / intervals;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * power;
  for (double m : {1.0, 2.0, 5.0})
    if (m * power >= raw * (1 - 1e-12)) {
      step = m * power;
      break;
    }
  return integer ? std::max(1.0, std::round(step)) : step;
}

AxisRange TickRange(AxisRange r, double step) {
  // A hair of slack so that a value on a tick, rounded a little past it,
  // does not add a whole interval.
  return {std::floor(r.lo / step + 1e-9) * step, std::ceil(r.hi / step - 1e-9) * step};
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
  const AxisRange x_data = RangeOf(xs), y_data = RangeOf(ys);
  const double x_step = TickStep(x_data.hi - x_data.lo, 10, /*integer=*/true);
  const double y_step = TickStep(y_data.hi - y_data.lo, 5, /*integer=*/false);
  const AxisRange xr = TickRange(x_data, x_step), yr = TickRange(y_data, y_step);
  out += YTicks(a, yr, y_step) + XTicks(a, xr, x_step);
  out += Line(a.left, a.top + a.height, a.left + a.width, a.top + a.height, "#333") +
         Line(a.left, a.top, a.left, a.top + a.height, "#333");
  out += Text(a.left + a.width / 2, kLinePlotHeight - 6, x_label, " text-anchor=\"middle\"");
  out += Text(14, a.top + a.height / 2, y_label,
              " text-anchor=\"middle\" transform=\"rotate(-90 14 " + Num(a.top + a.height / 2) + ")\"");
  for (size_t i = 0; i < series.size(); ++i)
    out += "<polyline fill=\"none\" stroke=\"" + std::string(PlotColour(i)) + "\" stroke-width=\"1.5\"" +
           (series[i].dashed ? " stroke-dasharray=\"6 4\"" : "") + " points=\"" + PolylinePoints(series[i], a, xr, yr) +
           "\"/>\n";
  return out + Legend(labels, a.left + a.width + 20, a.top + 10) + "</svg>\n";
}

std::string StackedBarsSvg(const std::string& title, const std::vector<Bar>& bars,
                           const std::function<std::string(double)>& format, const std::optional<BarMark>& mark) {
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
  if (mark) longest = std::max(longest, mark->value);
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
  if (mark) {
    const double x = kLabel + mark->value * scale, bottom = height - 6;
    out += "<line x1=\"" + Num(x) + "\" y1=\"" + Num(kTop - 4) + "\" x2=\"" + Num(x) + "\" y2=\"" + Num(bottom) +
           "\" stroke=\"#d62728\" stroke-width=\"1.5\" stroke-dasharray=\"5 3\"/>\n" +
           Text(x, kTop - 8, mark->label, " text-anchor=\"middle\" style=\"fill:#d62728\"");
  }
  return out + "</svg>\n";
}

}  // namespace kp
