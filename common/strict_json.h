// Parsing JSON a user wrote (preset files, validation cases, task lines,
// metrics files) strictly: nlohmann's parser keeps the last of two equal
// keys, so `"memory_gb": 141, "memory_gb": 999999` would silently plan with
// the second; here a key named twice in one object is an error, as an
// unknown key is. Header-only: every user already links nlohmann_json.
#ifndef KIMI_PLAN_COMMON_STRICT_JSON_H_
#define KIMI_PLAN_COMMON_STRICT_JSON_H_

#include <cmath>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "common/text.h"

namespace kp {

/// `text` as JSON (comments allowed when `allow_comments`), or
/// InvalidArgument "not valid JSON" / "PATH: key named twice" with the
/// repeated key's dotted path ("gpu.memory_gb").
inline Result<nlohmann::json> ParseStrictJson(std::string_view text, bool allow_comments = true) {
  using Event = nlohmann::json::parse_event_t;
  struct Level {
    std::set<std::string> keys;
    std::string last;
  };
  std::vector<Level> open;  // the objects being read, outermost first
  std::string duplicate;
  auto check = [&](int /*depth*/, Event event, nlohmann::json& parsed) {
    if (event == Event::object_start) {
      open.emplace_back();
    } else if (event == Event::object_end) {
      if (!open.empty()) open.pop_back();
    } else if (event == Event::key && !open.empty()) {
      const std::string key = parsed.get<std::string>();
      if (duplicate.empty() && !open.back().keys.insert(key).second) {
        for (std::size_t i = 0; i + 1 < open.size(); ++i) duplicate += open[i].last + ".";
        duplicate += key;
      }
      open.back().last = key;
    }
    return true;
  };
  nlohmann::json j =
      nlohmann::json::parse(text.begin(), text.end(), check, /*allow_exceptions=*/false, allow_comments);
  if (j.is_discarded()) return Status::InvalidArgument("not valid JSON");
  if (!duplicate.empty())
    return Status::InvalidArgument(QuoteBounded(duplicate) + ": the key is named twice (each field may appear once)");
  return j;
}

/// Ok when every number in `j` is finite; else InvalidArgument "WHAT: PATH
/// came out inf, not a finite number: ..." naming the first one, so that a
/// result no range check could foresee (an input out of proportion to the
/// others) is refused before it is printed or stored.
inline Status CheckFiniteNumbers(const nlohmann::json& j, const std::string& what, const std::string& path = "") {
  if (j.is_number_float()) {
    const double v = j.get<double>();
    if (std::isfinite(v)) return Status::Ok();
    return Status::InvalidArgument(what + ": " + (path.empty() ? "the result" : path) + " came out " +
                                   (std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf") +
                                   ", not a finite number: an input is out of proportion to the others (an "
                                   "efficiency or bandwidth too small, a cost too large)");
  }
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      KP_RETURN_IF_ERROR(CheckFiniteNumbers(it.value(), what, path.empty() ? it.key() : path + "." + it.key()));
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i)
      KP_RETURN_IF_ERROR(CheckFiniteNumbers(j[i], what, path + "[" + std::to_string(i) + "]"));
  }
  return Status::Ok();
}

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_STRICT_JSON_H_
