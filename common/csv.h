// CSV as RFC 4180 writes it, for every export (report's --csv): a field
// that holds a comma, a double quote or a line break is quoted, its quotes
// doubled, so a model or label named by a user reads back as one field.
#ifndef KIMI_PLAN_COMMON_CSV_H_
#define KIMI_PLAN_COMMON_CSV_H_

#include <string>
#include <string_view>
#include <vector>

namespace kp {

/// `text` as one CSV field: quoted when it must be (or always, with
/// `always_quote`), with each double quote doubled.
std::string CsvField(std::string_view text, bool always_quote = false);

/// The fields, each through CsvField, joined by commas and ended by "\n".
std::string CsvRow(const std::vector<std::string>& fields);

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_CSV_H_
