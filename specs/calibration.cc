#include "specs/calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "common/limits.h"
#include "common/table.h"
#include "specs/json_fields.h"

namespace kp {

using nlohmann::json;

namespace {
constexpr const char* kSchema = "kimi-plan.calibration/1";

bool PositiveFinite(double v) { return std::isfinite(v) && v > 0; }

// Six significant digits: a measured time is good to a fraction of a percent.
std::string Num(double v, int digits = 6) { return FormatSignificant(v, digits); }


size_t IndexOf(const std::vector<std::int64_t>& v, std::int64_t x) {
  return static_cast<size_t>(std::lower_bound(v.begin(), v.end(), x) - v.begin());
}

// Where x falls on a sorted grid: the lower index and the weight of the
// upper one in log space, clamped to the ends.
std::pair<size_t, double> Locate(const std::vector<std::int64_t>& grid, double x) {
  if (grid.size() == 1 || x <= double(grid.front())) return {0, 0.0};
  if (x >= double(grid.back())) return {grid.size() - 2, 1.0};
  size_t hi = static_cast<size_t>(std::upper_bound(grid.begin(), grid.end(), x) - grid.begin());
  const size_t lo = hi - 1;
  const double t = std::log(x / double(grid[lo])) / std::log(double(grid[hi]) / double(grid[lo]));
  return {lo, t};
}

// Below the grid a product is latency-bound: its throughput falls in
// proportion to the missing size.
double BelowGridFactor(const std::vector<std::int64_t>& grid, double x) {
  return x < double(grid.front()) ? x / double(grid.front()) : 1.0;
}

}  // namespace

const char* GemmDtypeName(GemmDtype d) {
  switch (d) {
    case GemmDtype::kBf16: return "bf16";
    case GemmDtype::kFp8: return "fp8";
    case GemmDtype::kBf16Grouped: return "bf16-grouped";
  }
  return "?";
}

Result<GemmGrid> GemmGrid::Build(std::vector<GemmPoint> points, const std::string& field) {
  GemmGrid g;
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t>> seen;
  for (size_t i = 0; i < points.size(); ++i) {
    const GemmPoint& p = points[i];
    const std::string at = field + "[" + std::to_string(i) + "]";
    if (p.m < 1 || p.n < 1 || p.k < 1)
      return Status::InvalidArgument(at + ": m, n and k must be positive integers");
    if (!PositiveFinite(p.time.value()))
      return Status::InvalidArgument(at + ": time must be finite and > 0 microseconds, got " + Num(p.time.value() * 1e6));
    if (!seen.insert({p.m, p.n, p.k}).second)
      return Status::InvalidArgument(at + ": shape m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) +
                                     " k=" + std::to_string(p.k) + " is listed twice");
    g.ms_.push_back(p.m);
    g.ns_.push_back(p.n);
    g.ks_.push_back(p.k);
  }
  if (points.empty()) return Status::InvalidArgument(field + ": needs at least one shape");
  for (auto* v : {&g.ms_, &g.ns_, &g.ks_}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
  g.flops_per_s_.assign(g.ms_.size() * g.ns_.size() * g.ks_.size(), 0.0);
  for (const GemmPoint& p : points) {
    const size_t idx = (IndexOf(g.ms_, p.m) * g.ns_.size() + IndexOf(g.ns_, p.n)) * g.ks_.size() + IndexOf(g.ks_, p.k);
    g.flops_per_s_[idx] = 2.0 * double(p.m) * double(p.n) * double(p.k) / p.time.value();
  }
  for (size_t i = 0; i < g.ms_.size(); ++i)
    for (size_t j = 0; j < g.ns_.size(); ++j)
      for (size_t l = 0; l < g.ks_.size(); ++l)
        if (g.FlopsPerSecondAt(i, j, l) == 0)
          return Status::InvalidArgument(field + ": shape m=" + std::to_string(g.ms_[i]) + " n=" +
                                         std::to_string(g.ns_[j]) + " k=" + std::to_string(g.ks_[l]) +
                                         " is missing (the table must hold every combination of its m, n and k values)");
  g.points_ = std::move(points);
  return g;
}

double GemmGrid::FlopsPerSecondAt(size_t i, size_t j, size_t l) const {
  return flops_per_s_[(i * ns_.size() + j) * ks_.size() + l];
}

Seconds GemmGrid::Time(double m, double n, double k) const {
  const auto [i, ti] = Locate(ms_, m);
  const auto [j, tj] = Locate(ns_, n);
  const auto [l, tl] = Locate(ks_, k);
  double log_rate = 0;
  for (int di = 0; di < 2; ++di)
    for (int dj = 0; dj < 2; ++dj)
      for (int dl = 0; dl < 2; ++dl) {
        const double w = (di ? ti : 1 - ti) * (dj ? tj : 1 - tj) * (dl ? tl : 1 - tl);
        if (w == 0) continue;
        const size_t ii = std::min(i + di, ms_.size() - 1), jj = std::min(j + dj, ns_.size() - 1),
                     ll = std::min(l + dl, ks_.size() - 1);
        log_rate += w * std::log(FlopsPerSecondAt(ii, jj, ll));
      }
  const double rate = std::exp(log_rate) * BelowGridFactor(ms_, m) * BelowGridFactor(ns_, n) * BelowGridFactor(ks_, k);
  return Seconds(2.0 * m * n * k / rate);
}

double GemmGrid::Efficiency(double m, double n, double k, FlopsPerSecond peak) const {
  return 2.0 * m * n * k / Time(m, n, k).value() / peak.value();
}

const char* CollectiveOpName(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce: return "all-reduce";
    case CollectiveOp::kAllGather: return "all-gather";
    case CollectiveOp::kReduceScatter: return "reduce-scatter";
    case CollectiveOp::kAllToAll: return "all-to-all";
    case CollectiveOp::kBroadcast: return "broadcast";
    case CollectiveOp::kSendRecv: return "send-recv";
  }
  return "?";
}

Result<CollectiveOp> ParseCollectiveOp(const std::string& name, const std::string& field) {
  for (CollectiveOp op : {CollectiveOp::kAllReduce, CollectiveOp::kAllGather, CollectiveOp::kReduceScatter,
                          CollectiveOp::kAllToAll, CollectiveOp::kBroadcast, CollectiveOp::kSendRecv})
    if (name == CollectiveOpName(op)) return op;
  return Status::InvalidArgument(field + ": must be all-reduce, all-gather, reduce-scatter, all-to-all, broadcast "
                                 "or send-recv, got \"" + name + "\"");
}

const char* LinkSpanName(LinkSpan s) { return s == LinkSpan::kNvlink ? "nvlink" : "fabric"; }

double BusFactor(CollectiveOp op, int ranks) {
  const double n = std::max(ranks, 1);
  switch (op) {
    case CollectiveOp::kAllReduce: return 2.0 * (n - 1) / n;
    case CollectiveOp::kAllGather:
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kAllToAll: return (n - 1) / n;
    case CollectiveOp::kBroadcast:
    case CollectiveOp::kSendRecv: return 1.0;
  }
  return 1.0;
}

const GemmGrid* CalibrationTable::Gemm(GemmDtype d) const {
  auto it = gemm.find(d);
  return it == gemm.end() ? nullptr : &it->second;
}

std::optional<Seconds> CalibrationTable::CollectiveTime(CollectiveOp op, LinkSpan span, int ranks, Bytes bytes) const {
  if (ranks <= 1 || bytes.value() <= 0) return Seconds(0);
  const CollectiveCurve* best = nullptr;
  for (const CollectiveCurve& c : collectives)
    if (c.op == op && c.span == span && (!best || std::abs(c.ranks - ranks) < std::abs(best->ranks - ranks)))
      best = &c;
  if (!best) return std::nullopt;
  // Bus bandwidth at each measured size, interpolated log-log in the size.
  auto bus = [&](const CollectivePoint& p) {
    return BusFactor(op, best->ranks) * p.bytes.value() / p.time.value();
  };
  const auto& pts = best->points;
  double bw;
  if (bytes <= pts.front().bytes) {
    // Below the smallest size the time stays that size's (latency-bound).
    return Seconds(pts.front().time.value() * BusFactor(op, ranks) / BusFactor(op, best->ranks));
  } else if (bytes >= pts.back().bytes) {
    bw = bus(pts.back());
  } else {
    size_t hi = 1;
    while (pts[hi].bytes < bytes) ++hi;
    const CollectivePoint &a = pts[hi - 1], &b = pts[hi];
    const double t = std::log(bytes / a.bytes) / std::log(b.bytes / a.bytes);
    bw = std::exp((1 - t) * std::log(bus(a)) + t * std::log(bus(b)));
  }
  return Seconds(BusFactor(op, ranks) * bytes.value() / bw);
}

namespace {

Result<GemmGrid> ParseGemmGrid(const json& rows, const std::string& field) {
  if (!rows.is_array()) return Status::InvalidArgument(field + ": must be a list of [m, n, k, microseconds]");
  std::vector<GemmPoint> points;
  for (size_t i = 0; i < rows.size(); ++i) {
    const json& r = rows[i];
    const std::string at = field + "[" + std::to_string(i) + "]";
    if (!r.is_array() || r.size() != 4 || !r[0].is_number_integer() || !r[1].is_number_integer() ||
        !r[2].is_number_integer() || !r[3].is_number())
      return Status::InvalidArgument(at + ": must be [m, n, k, microseconds] with integer sizes");
    points.push_back({r[0].get<std::int64_t>(), r[1].get<std::int64_t>(), r[2].get<std::int64_t>(),
                      Seconds(r[3].get<double>() * 1e-6)});
  }
  return GemmGrid::Build(std::move(points), field);
}

Result<CollectiveCurve> ParseCurve(const json& j, const std::string& field) {
  if (!j.is_object()) return Status::InvalidArgument(field + ": must be an object");
  Fields f(j, field);
  CollectiveCurve c;
  std::string op, span;
  KP_RETURN_IF_ERROR(f.String("op", &op));
  KP_ASSIGN_OR_RETURN(c.op, ParseCollectiveOp(op, field + ".op"));
  KP_RETURN_IF_ERROR(f.String("span", &span));
  if (span == "nvlink") c.span = LinkSpan::kNvlink;
  else if (span == "fabric") c.span = LinkSpan::kFabric;
  else return Status::InvalidArgument(field + ".span: must be nvlink or fabric, got \"" + span + "\"");
  KP_RETURN_IF_ERROR(f.Int("ranks", &c.ranks, 0, limits::kMaxClusterGpus));
  if (c.ranks < 2) return Status::InvalidArgument(field + ".ranks: must be at least 2");
  KP_RETURN_IF_ERROR(f.Text("source", &c.source, false));
  const json* points = nullptr;
  KP_ASSIGN_OR_RETURN(points, f.Array("points", true));
  if (points->empty()) return Status::InvalidArgument(field + ".points: must be a non-empty list of [bytes, microseconds]");
  for (size_t i = 0; i < points->size(); ++i) {
    const json& p = (*points)[i];
    const std::string at = field + ".points[" + std::to_string(i) + "]";
    if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number())
      return Status::InvalidArgument(at + ": must be [bytes, microseconds]");
    const double bytes = p[0].get<double>(), us = p[1].get<double>();
    if (!PositiveFinite(bytes)) return Status::InvalidArgument(at + ": bytes must be finite and > 0");
    if (!PositiveFinite(us))
      return Status::InvalidArgument(at + ": time must be finite and > 0 microseconds, got " + Num(us));
    if (!c.points.empty() && bytes <= c.points.back().bytes.value())
      return Status::InvalidArgument(at + ": sizes must increase");
    c.points.push_back({Bytes(bytes), Seconds(us * 1e-6)});
  }
  KP_RETURN_IF_ERROR(f.NoUnknownKeys());
  return c;
}

}  // namespace

Result<CalibrationTable> ParseCalibration(const std::string& text) {
  KP_ASSIGN_OR_RETURN(json j, ParseObject(text));
  Fields f(j, "");
  CalibrationTable t;
  std::string schema;
  KP_RETURN_IF_ERROR(f.String("schema", &schema));
  if (schema != kSchema)
    return Status::InvalidArgument(std::string("schema: must be \"") + kSchema + "\", got \"" + schema + "\"");
  KP_RETURN_IF_ERROR(f.Name("gpu", &t.gpu));
  KP_RETURN_IF_ERROR(f.Text("source", &t.source));
  double copy = 0;
  KP_RETURN_IF_ERROR(f.Number("memory_copy_gbytes_per_s", &copy, 0, limits::kMaxBandwidth, false));
  if (!std::isfinite(copy) || copy < 0)
    return Status::InvalidArgument("memory_copy_gbytes_per_s: must be finite and >= 0");
  t.memory_copy = GBps(copy);
  const json* elementwise = nullptr;
  KP_ASSIGN_OR_RETURN(elementwise, f.Object("elementwise"));
  if (elementwise) {
    Fields e(*elementwise, "elementwise");
    // Any finite number here; the range is checked below with its own message.
    KP_RETURN_IF_ERROR(e.Number("share", &t.elementwise_share, std::numeric_limits<double>::lowest(),
                                std::numeric_limits<double>::max()));
    if (!std::isfinite(t.elementwise_share) || t.elementwise_share <= 0 || t.elementwise_share > 1)
      return Status::InvalidArgument("elementwise.share: must be in (0, 1]");
    // A layer pass of more than a second is no GPU's launch overhead.
    double overhead_us = 0;
    KP_RETURN_IF_ERROR(e.Number("layer_overhead_us", &overhead_us, 0, 1e6, false));
    t.elementwise_layer_overhead = Seconds(overhead_us * 1e-6);
    KP_RETURN_IF_ERROR(e.Text("source", &t.elementwise_source));
    KP_RETURN_IF_ERROR(e.NoUnknownKeys());
  }
  const json* gemm = nullptr;
  KP_ASSIGN_OR_RETURN(gemm, f.Object("gemm", true));
  for (auto it = gemm->begin(); it != gemm->end(); ++it) {
    GemmDtype d;
    if (it.key() == "bf16") d = GemmDtype::kBf16;
    else if (it.key() == "fp8") d = GemmDtype::kFp8;
    else if (it.key() == "bf16-grouped") d = GemmDtype::kBf16Grouped;
    else return Status::InvalidArgument("gemm." + it.key() + ": unknown dtype (bf16, fp8 or bf16-grouped)");
    KP_ASSIGN_OR_RETURN(GemmGrid g, ParseGemmGrid(it.value(), "gemm." + it.key()));
    t.gemm.emplace(d, std::move(g));
  }
  if (!t.Gemm(GemmDtype::kBf16)) return Status::InvalidArgument("gemm.bf16: required field is missing");
  const json* curves = nullptr;
  KP_ASSIGN_OR_RETURN(curves, f.Array("collectives"));
  for (size_t i = 0; curves && i < curves->size(); ++i) {
    KP_ASSIGN_OR_RETURN(CollectiveCurve c, ParseCurve((*curves)[i], "collectives[" + std::to_string(i) + "]"));
    t.collectives.push_back(std::move(c));
  }
  KP_RETURN_IF_ERROR(f.NoUnknownKeys());
  return t;
}

// One GEMM row or collective per line, so a table reads and diffs by shape.
std::string CalibrationToJson(const CalibrationTable& t) {
  std::ostringstream o;
  o << "{\n \"schema\": " << json(kSchema).dump() << ",\n \"gpu\": " << json(t.gpu).dump()
    << ",\n \"source\": " << json(t.source).dump()
    << ",\n \"memory_copy_gbytes_per_s\": " << Num(t.memory_copy.value() / 1e9)
    << ",\n \"elementwise\": {\"share\": " << Num(t.elementwise_share)
    << ", \"layer_overhead_us\": " << Num(t.elementwise_layer_overhead.value() * 1e6)
    << ", \"source\": " << json(t.elementwise_source).dump() << "},\n \"gemm\": {";
  const char* sep = "";
  for (const auto& [d, g] : t.gemm) {
    o << sep << "\n  \"" << GemmDtypeName(d) << "\": [";
    for (size_t i = 0; i < g.points().size(); ++i) {
      const GemmPoint& p = g.points()[i];
      o << (i ? ",\n   [" : "\n   [") << p.m << ", " << p.n << ", " << p.k << ", " << Num(p.time.value() * 1e6) << "]";
    }
    o << "\n  ]";
    sep = ",";
  }
  o << "\n },\n \"collectives\": [";
  for (size_t i = 0; i < t.collectives.size(); ++i) {
    const CollectiveCurve& c = t.collectives[i];
    o << (i ? ",\n  " : "\n  ") << "{\"op\": \"" << CollectiveOpName(c.op) << "\", \"span\": \"" << LinkSpanName(c.span)
      << "\", \"ranks\": " << c.ranks << ", \"source\": " << json(c.source).dump() << ", \"points\": [";
    for (size_t k = 0; k < c.points.size(); ++k)
      o << (k ? ", [" : "[") << Num(c.points[k].bytes.value(), 12) << ", " << Num(c.points[k].time.value() * 1e6) << "]";
    o << "]}";
  }
  o << (t.collectives.empty() ? "]\n}" : "\n ]\n}");
  return o.str();
}

}  // namespace kp
