#include "common/csv.h"

namespace kp {

std::string CsvField(std::string_view text, bool always_quote) {
  const bool quote = always_quote || text.find_first_of(",\"\r\n") != std::string_view::npos;
  if (!quote) return std::string(text);
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string CsvRow(const std::vector<std::string>& fields) {
  std::string out;
  for (std::size_t i = 0; i < fields.size(); ++i) out += (i ? "," : "") + CsvField(fields[i]);
  return out + "\n";
}

}  // namespace kp
