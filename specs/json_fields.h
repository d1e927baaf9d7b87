// Strict reading of the preset-format JSON files (models, GPUs, topologies,
// calibration tables): every field is read through `Fields`, which remembers
// what was consumed so that a misspelt key is an error rather than ignored.
// Errors name the field with its dotted path ("moe.top_k: must be an integer").
#ifndef KIMI_PLAN_SPECS_JSON_FIELDS_H_
#define KIMI_PLAN_SPECS_JSON_FIELDS_H_

#include <cstdint>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "common/range.h"
#include "common/status.h"
#include "common/strict_json.h"
#include "common/text.h"

namespace kp {

// Reads fields out of one JSON object, remembering which keys were consumed
// so that a misspelt key is reported rather than silently ignored.
class Fields {
 public:
  Fields(const nlohmann::json& j, std::string prefix) : j_(j), prefix_(std::move(prefix)) {}

  /// An integer field within [min, max]. Integers beyond 64 bits, and
  /// values out of range, are refused before anything is narrowed, so a
  /// file cannot wrap a count ("vocab": 4294969344 is not 2048); a number
  /// with a fraction or exponent ("vocab": 1.5e5) is not an integer.
  /// common/limits.h states the bounds the parsers pass.
  Status Int(const char* key, std::int64_t* out, std::int64_t min, std::int64_t max, bool required = true) {
    used_.insert(key);
    if (!j_.contains(key)) return Missing(key, required);
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number_integer())
      return Status::InvalidArgument(Name(key) + ": must be an integer from " + std::to_string(min) + " to " +
                                     std::to_string(max));
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(max))
      return Status::InvalidArgument(Name(key) + ": must be at most " + std::to_string(max) + ", got " + v.dump());
    const std::int64_t x = v.get<std::int64_t>();
    KP_RETURN_IF_ERROR(CheckIntRange(Name(key), x, min, max));
    *out = x;
    return Status::Ok();
  }
  /// The same into an int: [min, max] must lie within int's range.
  Status Int(const char* key, int* out, std::int64_t min, std::int64_t max, bool required = true) {
    std::int64_t x = *out;
    KP_RETURN_IF_ERROR(Int(key, &x, min, max, required));
    *out = static_cast<int>(x);
    return Status::Ok();
  }
  /// A finite number within [min, max].
  Status Number(const char* key, double* out, double min, double max, bool required = true) {
    used_.insert(key);
    if (!j_.contains(key)) return Missing(key, required);
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number()) return Status::InvalidArgument(Name(key) + ": must be a number");
    const double x = v.get<double>();
    KP_RETURN_IF_ERROR(CheckNumberRange(Name(key), x, min, max));
    *out = x;
    return Status::Ok();
  }
  Status String(const char* key, std::string* out, bool required = true) {
    used_.insert(key);
    if (!j_.contains(key)) return Missing(key, required);
    const nlohmann::json& v = j_.at(key);
    if (!v.is_string()) return Status::InvalidArgument(Name(key) + ": must be a string");
    *out = v.get<std::string>();
    return Status::Ok();
  }
  /// A name (a model, GPU, topology or case id): printable ASCII, 1 to 128
  /// bytes (common/text.h), since names reach job scripts, the store, the
  /// terminal and reports.
  Status Name(const char* key, std::string* out, bool required = true) {
    const bool present = j_.contains(key);
    KP_RETURN_IF_ERROR(String(key, out, required));
    return present ? CheckName(Name(key), *out) : Status::Ok();
  }
  /// Free text (a source, a note): at most 4096 bytes, no control character
  /// but a tab.
  Status Text(const char* key, std::string* out, bool required = true) {
    const bool present = j_.contains(key);
    KP_RETURN_IF_ERROR(String(key, out, required));
    return present ? CheckText(Name(key), *out) : Status::Ok();
  }
  Status Bool(const char* key, bool* out) {
    used_.insert(key);
    if (!j_.contains(key)) return Status::Ok();
    const nlohmann::json& v = j_.at(key);
    if (!v.is_boolean()) return Status::InvalidArgument(Name(key) + ": must be true or false");
    *out = v.get<bool>();
    return Status::Ok();
  }
  /// A nested object; absent is fine when not required (returns null).
  Result<const nlohmann::json*> Object(const char* key, bool required = false) {
    used_.insert(key);
    if (!j_.contains(key)) {
      Status s = Missing(key, required);
      if (!s.ok()) return s;
      return static_cast<const nlohmann::json*>(nullptr);
    }
    if (!j_.at(key).is_object()) return Status::InvalidArgument(Name(key) + ": must be an object");
    return &j_.at(key);
  }
  /// A nested list; absent is fine when not required (returns null).
  Result<const nlohmann::json*> Array(const char* key, bool required = false) {
    used_.insert(key);
    if (!j_.contains(key)) {
      Status s = Missing(key, required);
      if (!s.ok()) return s;
      return static_cast<const nlohmann::json*>(nullptr);
    }
    if (!j_.at(key).is_array()) return Status::InvalidArgument(Name(key) + ": must be a list");
    return &j_.at(key);
  }
  /// Every key present must have been read.
  Status NoUnknownKeys() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!used_.count(it.key()))
        return Status::InvalidArgument(Name(it.key().c_str()) + ": unknown field");
    return Status::Ok();
  }
  std::string Name(const char* key) const { return prefix_.empty() ? key : prefix_ + "." + key; }
  /// The object the fields are read from.
  const nlohmann::json& object() const { return j_; }

 private:
  Status Missing(const char* key, bool required) const {
    if (!required) return Status::Ok();
    return Status::InvalidArgument(Name(key) + ": required field is missing");
  }
  const nlohmann::json& j_;
  std::string prefix_;
  std::set<std::string> used_;
};

/// A file's top-level object, parsed strictly (a key named twice is an
/// error: common/strict_json.h).
inline Result<nlohmann::json> ParseObject(const std::string& text) {
  KP_ASSIGN_OR_RETURN(nlohmann::json j, ParseStrictJson(text));
  if (!j.is_object()) return Status::InvalidArgument("the top level must be a JSON object");
  return j;
}

}  // namespace kp

#endif  // KIMI_PLAN_SPECS_JSON_FIELDS_H_
