#include "report/compare.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>
#include <sstream>

#include "common/csv.h"
#include "common/table.h"

namespace kp {

namespace {

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) out.push_back(item);
  if (!text.empty() && text.back() == ',') out.push_back("");
  return out;
}

bool AllDigits(const std::string& s) {
  return !s.empty() && s.size() <= 9 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

CompareCell MakeCell(const RunData& run, const RunData& reference, const std::string& metric, int step, bool is_ref) {
  CompareCell cell{metric, step, run.At(metric, step), reference.At(metric, step), ""};
  if (is_ref) return cell;
  cell.change = cell.value && cell.reference ? ChangeText(*cell.value, *cell.reference) : "-";
  return cell;
}

CompareRow MakeRow(const RunData& run, const RunData& reference, const Comparison& c, bool is_ref) {
  CompareRow row{run.run.id, "run " + std::to_string(run.run.id) + " (" + run.run.model + ")", is_ref, {}};
  for (const std::string& m : c.metrics)
    for (int s : c.steps) row.cells.push_back(MakeCell(run, reference, m, s, is_ref));
  return row;
}

std::string ColumnTitle(const std::string& metric, int step, bool first_of_metric) {
  return first_of_metric ? DescribeMetric(metric).label + ", step " + std::to_string(step)
                         : "step " + std::to_string(step);
}

}  // namespace

Result<std::vector<int>> ParseSteps(const std::string& text) {
  std::vector<int> out;
  for (const std::string& item : SplitCommas(text)) {
    if (!AllDigits(item) || std::stoi(item) == 0)
      return Status::InvalidArgument("--steps: \"" + text + "\" is not a comma-separated list of positive step numbers");
    const int step = std::stoi(item);
    if (std::find(out.begin(), out.end(), step) != out.end())
      return Status::InvalidArgument("--steps: step " + item + " is listed twice");
    out.push_back(step);
  }
  if (out.empty()) return Status::InvalidArgument("--steps: empty; give steps like 1,10,50,100");
  return out;
}

Result<std::vector<std::string>> ParseMetrics(const std::string& text) {
  std::vector<std::string> out;
  for (const std::string& item : SplitCommas(text)) {
    if (item.empty()) return Status::InvalidArgument("--metric: \"" + text + "\" has an empty name");
    if (std::find(out.begin(), out.end(), item) != out.end())
      return Status::InvalidArgument("--metric: " + item + " is listed twice");
    out.push_back(item);
  }
  if (out.empty()) return Status::InvalidArgument("--metric: empty; give metrics like loss,grad_norm");
  return out;
}

std::string ChangeText(double value, double reference) {
  // Bitwise, as the seed's tables mean it: -0.0 differs from 0.0 and a NaN
  // equals itself.
  if (std::bit_cast<std::uint64_t>(value) == std::bit_cast<std::uint64_t>(reference)) return "identical";
  if (reference == 0) return "n/a";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%+.2f%%", 100.0 * (value - reference) / std::fabs(reference));
  return buf;
}

std::vector<int> DefaultSteps(const RunData& reference) {
  std::vector<int> out;
  for (int s : {1, 10, 50, 100})
    if (std::binary_search(reference.steps.steps.begin(), reference.steps.steps.end(), s)) out.push_back(s);
  if (!reference.steps.steps.empty() && (out.empty() || out.back() < reference.steps.steps.back()))
    out.push_back(reference.steps.steps.back());
  return out;
}

Result<Comparison> Compare(const RunData& reference, const std::vector<RunData>& runs,
                           const std::vector<std::string>& metrics, std::vector<int> steps) {
  for (const std::string& m : metrics)
    if (!reference.HasMetric(m))
      return Status::InvalidArgument("--metric: no metric \"" + m + "\" in the steps table (it has " +
                                     JoinNames(reference.steps.names) + ")");
  Comparison c;
  c.metrics = metrics;
  c.steps = steps.empty() ? DefaultSteps(reference) : std::move(steps);
  c.rows.push_back(MakeRow(reference, reference, c, true));
  for (const RunData& r : runs) c.rows.push_back(MakeRow(r, reference, c, false));
  return c;
}

std::string RenderComparison(const Comparison& c) {
  std::vector<std::string> header = {"run"};
  for (const std::string& m : c.metrics)
    for (size_t i = 0; i < c.steps.size(); ++i) header.push_back(ColumnTitle(m, c.steps[i], i == 0));
  Table t(header);
  for (const CompareRow& row : c.rows) {
    std::vector<std::string> values = {row.label + (row.is_reference ? ", reference" : "")}, changes = {""};
    for (const CompareCell& cell : row.cells) {
      values.push_back(cell.value ? FormatMetric(cell.metric, *cell.value) : "-");
      changes.push_back(cell.change);
    }
    t.AddRow(values);
    if (!row.is_reference) t.AddRow(changes);
  }
  return t.Render();
}

std::string ComparisonCsv(const Comparison& c) {
  std::string out = "run_id,label,reference,metric,step,value,reference_value,change\n";
  auto num = [](const std::optional<double>& v) { return v ? FormatShortest(*v) : std::string(); };
  for (const CompareRow& row : c.rows)
    for (const CompareCell& cell : row.cells)
      out += std::to_string(row.run_id) + "," + CsvField(row.label, /*always_quote=*/true) + "," +
             (row.is_reference ? "1" : "0") + "," + CsvField(cell.metric) + "," + std::to_string(cell.step) + "," +
             num(cell.value) + "," + num(cell.reference) + "," + CsvField(cell.change) + "\n";
  return out;
}

nlohmann::json ComparisonJson(const Comparison& c) {
  auto num = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  nlohmann::json rows = nlohmann::json::array();
  for (const CompareRow& row : c.rows) {
    nlohmann::json cells = nlohmann::json::array();
    for (const CompareCell& cell : row.cells)
      cells.push_back({{"metric", cell.metric}, {"step", cell.step}, {"value", num(cell.value)},
                       {"reference_value", num(cell.reference)}, {"change", cell.change}});
    rows.push_back({{"run_id", row.run_id}, {"label", row.label}, {"reference", row.is_reference}, {"cells", cells}});
  }
  return {{"reference", c.rows.empty() ? 0 : c.rows.front().run_id}, {"metrics", c.metrics}, {"steps", c.steps},
          {"rows", rows}};
}

}  // namespace kp
