// A plain-text table for the commands' default output: columns padded to
// their widest cell, numbers right-aligned.
#ifndef KIMI_PLAN_COMMON_TABLE_H_
#define KIMI_PLAN_COMMON_TABLE_H_

#include <string>
#include <vector>

namespace kp {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  /// A row; each cell's control bytes are shown escaped (common/text.h), so
  /// a name from a file cannot reach the terminal as an escape sequence.
  void AddRow(std::vector<std::string> row);
  std::string Render() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// The numbers kimi-plan prints, in one place: fixed decimals for tables and
// drawings, significant digits for tick labels and measured times, and the
// shortest text that reads back as the same double for exports.

/// 1234.5678 -> "1234.57" with `digits` after the point.
std::string FormatFixed(double v, int digits);
/// `digits` significant digits, no trailing zeros: 0.001234567 -> "0.001235" (4).
std::string FormatSignificant(double v, int digits);
/// The shortest text that reads back as exactly `v` (std::to_chars):
/// 0.1 -> "0.1", 3.0300000000000002 stays, 5 -> "5"; "inf", "nan".
std::string FormatShortest(double v);
/// Bytes as "123.4 GB" (decimal units, as GPU datasheets quote them).
std::string FormatGB(double bytes);
/// 1.03e12 -> "1.03T", 3.29e10 -> "32.9B".
std::string FormatCount(double n);

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_TABLE_H_
