#include "common/table.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <sstream>

#include "common/text.h"

namespace kp {

namespace {
// A number, optionally signed, optionally followed by a unit ("12.5 GB",
// "37%"): right-aligned. Anything else ("2-4", "7, head") is text.
bool LooksNumeric(const std::string& s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  const size_t digits_from = i;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == digits_from) return false;
  if (i < s.size() && s[i] == 'e') {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  }
  if (i < s.size() && s[i] == ' ') ++i;
  while (i < s.size() && (std::isalpha(static_cast<unsigned char>(s[i])) || s[i] == '%' || s[i] == '/')) ++i;
  return i == s.size();
}
}  // namespace

void Table::AddRow(std::vector<std::string> row) {
  for (std::string& cell : row) cell = EscapeControl(cell);
  rows_.push_back(std::move(row));
}

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

std::string FormatSignificant(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

std::string FormatShortest(double v) {
  char buf[64];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string FormatGB(double bytes) { return FormatFixed(bytes / 1e9, 1) + " GB"; }

std::string FormatCount(double n) {
  if (n >= 1e12) return FormatFixed(n / 1e12, 3) + "T";
  if (n >= 1e9) return FormatFixed(n / 1e9, 2) + "B";
  if (n >= 1e6) return FormatFixed(n / 1e6, 2) + "M";
  return FormatFixed(n, 0);
}

}  // namespace kp
