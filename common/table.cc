#include "common/table.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace kp {

namespace {
bool LooksNumeric(const std::string& s) {
  if (s.empty()) return false;
  const char c = s[0];
  return (c >= '0' && c <= '9') || ((c == '-' || c == '+' || c == '.') && s.size() > 1);
}
}  // namespace

std::string Table::Render() const {
  std::vector<size_t> width(header_.size(), 0);
  auto widen = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) width[i] = std::max(width[i], row[i].size());
  };
  widen(header_);
  for (const auto& r : rows_) widen(r);
  std::ostringstream out;
  auto emit = [&](const std::vector<std::string>& row, bool header) {
    for (size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      const size_t pad = width[i] - cell.size();
      const bool right = !header && LooksNumeric(cell);
      if (i) out << "  ";
      if (right) out << std::string(pad, ' ') << cell;
      else out << cell << (i + 1 < width.size() ? std::string(pad, ' ') : "");
    }
    out << "\n";
  };
  emit(header_, true);
  size_t total = 0;
  for (size_t w : width) total += w;
  out << std::string(total + 2 * (width.size() - 1), '-') << "\n";
  for (const auto& r : rows_) emit(r, false);
  return out.str();
}

std::string FormatFixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string FormatGB(double bytes) { return FormatFixed(bytes / 1e9, 1) + " GB"; }

std::string FormatCount(double n) {
  if (n >= 1e12) return FormatFixed(n / 1e12, 3) + "T";
  if (n >= 1e9) return FormatFixed(n / 1e9, 2) + "B";
  if (n >= 1e6) return FormatFixed(n / 1e6, 2) + "M";
  return FormatFixed(n, 0);
}

}  // namespace kp
