// How the benchmark programs read their command lines: "--name value" pairs,
// and numbers through the CLI's range-checked readers (common/range.h), so
// a value that is not a number, or out of range, is one line naming the
// option and what it allows, never an uncaught exception.
#ifndef KIMI_PLAN_BENCH_BENCH_OPTIONS_H_
#define KIMI_PLAN_BENCH_BENCH_OPTIONS_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "common/range.h"
#include "common/status.h"

namespace kp::bench {

/// The command line as "--name value" pairs by name; `flag` (without its
/// dashes) is the one option without a value, and `*flagged` says whether it
/// was given. Anything else is an InvalidArgument naming the token.
inline Result<std::map<std::string, std::string>> OptionPairs(int argc, char** argv, const std::string& flag,
                                                             bool* flagged) {
  std::map<std::string, std::string> kv;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--" + flag) {
      *flagged = true;
      continue;
    }
    if (k.rfind("--", 0) != 0 || i + 1 >= argc) return Status::InvalidArgument("bad argument: " + k);
    kv[k.substr(2)] = argv[++i];
  }
  return kv;
}

/// Option --`name`'s value as an integer in [min, max] (ParseIntInRange).
template <typename Int = int>
Result<Int> IntOption(const std::string& name, const std::string& text, Int min,
                      Int max = std::numeric_limits<Int>::max()) {
  KP_ASSIGN_OR_RETURN(const std::int64_t v, ParseIntInRange("--" + name, text, min, max));
  return static_cast<Int>(v);
}

/// Option --`name`'s value as integers joined by commas, each in [min, max].
inline Result<std::vector<std::int64_t>> IntListOption(const std::string& name, const std::string& text,
                                                       std::int64_t min, std::int64_t max) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    KP_ASSIGN_OR_RETURN(const std::int64_t v, IntOption<std::int64_t>(name, text.substr(start, end - start), min, max));
    out.push_back(v);
    start = end + 1;
  }
  return out;
}

/// Option --`name`'s value as a finite number in [min, max], or (min, max]
/// when `min_open` (ParseNumberInRange).
inline Result<double> NumberOption(const std::string& name, const std::string& text, double min,
                                   double max = std::numeric_limits<double>::max(), bool min_open = false) {
  return ParseNumberInRange("--" + name, text, min, max, min_open);
}

/// Option --`name`'s value "on" or "off" as a bool; anything else is an
/// InvalidArgument naming the option.
inline Result<bool> OnOffOption(const std::string& name, const std::string& text) {
  if (text != "on" && text != "off") return Status::InvalidArgument("--" + name + ": on or off, got " + text);
  return text == "on";
}

/// An integer option's destination and least value.
using IntOptions = std::map<std::string, std::pair<int*, int>>;
using StringOptions = std::map<std::string, std::string*>;

/// Sets each pair of `kv` whose name `ints` (checked against its least
/// value) or `strings` holds; hands the others to `other`, which returns
/// false for a name it does not take either (then an InvalidArgument
/// "unknown option --NAME").
inline Status ApplyOptions(const std::map<std::string, std::string>& kv, const IntOptions& ints,
                           const StringOptions& strings,
                           const std::function<Result<bool>(const std::string&, const std::string&)>& other) {
  for (const auto& [k, v] : kv) {
    if (auto it = ints.find(k); it != ints.end()) {
      KP_ASSIGN_OR_RETURN(*it->second.first, IntOption(k, v, it->second.second));
    } else if (auto s = strings.find(k); s != strings.end()) {
      *s->second = v;
    } else {
      KP_ASSIGN_OR_RETURN(const bool taken, other(k, v));
      if (!taken) return Status::InvalidArgument("unknown option --" + k);
    }
  }
  return Status::Ok();
}

}  // namespace kp::bench

#endif  // KIMI_PLAN_BENCH_BENCH_OPTIONS_H_
