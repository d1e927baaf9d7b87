#include "launcher/quoting.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "common/table.h"

namespace kp {

namespace {

bool ShellSafe(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string("_@%+=:,./-").find(c) != std::string::npos;
}

}  // namespace

std::string ShellQuote(const std::string& s) {
  bool safe = !s.empty();
  for (char c : s) safe = safe && ShellSafe(c);
  if (safe) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string PythonString(const std::string& s) {
  // A JSON string literal is a valid Python literal with the same value:
  // both read \" \\ \n \t \uXXXX the same way. ASCII-only, and bytes
  // that are not UTF-8 replaced, so any path yields a valid literal.
  return nlohmann::json(s).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

std::string FormatNumber(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  return FormatShortest(v);
}

}  // namespace kp
