// Writing values into generated shell and Python text so that they reach
// the program as exactly one word or one string, whatever they contain.
#ifndef KIMI_PLAN_LAUNCHER_QUOTING_H_
#define KIMI_PLAN_LAUNCHER_QUOTING_H_

#include <string>

namespace kp {

/// `s` as one bash word: unchanged when it holds only characters bash
/// never interprets (letters, digits and _@%+=:,./-), else single-quoted.
std::string ShellQuote(const std::string& s);

/// `s` as a Python string literal (double-quoted, escaped).
std::string PythonString(const std::string& s);

/// A number without a spurious fraction: 64 -> "64", 0.5 -> "0.5".
std::string FormatNumber(double v);

}  // namespace kp

#endif  // KIMI_PLAN_LAUNCHER_QUOTING_H_
