#include "ingest/metrics_file.h"

#include <nlohmann/json.hpp>

#include "common/strict_json.h"

namespace kp {

namespace {

using json = nlohmann::json;

Status LineError(const std::string& file, int line, const std::string& what) {
  return Status::InvalidArgument(file + ":" + std::to_string(line) + ": " + what);
}

bool IsBlank(std::string_view s) { return s.find_first_not_of(" \t\r") == std::string_view::npos; }

// The metrics of one line after `last_step`, or the line's error.
Status ParseLine(std::string_view text, const std::string& file, int line, int last_step, int* step,
                 std::vector<MetricRecord>* out) {
  Result<json> parsed = ParseStrictJson(text, /*allow_comments=*/false);
  if (!parsed.ok()) return LineError(file, line, "not a JSON object (" + parsed.status().message() + ")");
  const json& j = *parsed;
  if (!j.is_object()) return LineError(file, line, "not a JSON object");
  auto s = j.find("step");
  if (s == j.end() || !s->is_number_integer() || s->get<std::int64_t>() < 0 || s->get<std::int64_t>() > (1 << 30))
    return LineError(file, line, "\"step\" must be an integer from 0 to 2^30");
  *step = s->get<int>();
  if (*step <= last_step)
    return LineError(file, line, "step " + std::to_string(*step) + " does not come after step " +
                                     std::to_string(last_step) + " (steps must increase)");
  auto data = j.find("data");
  if (data == j.end() || !data->is_object()) return LineError(file, line, "\"data\" must be an object of metrics");
  auto add = [&](const std::string& name, const json& v) -> Status {
    if (v.is_null()) return Status::Ok();  // Verl's NaN, as orjson writes it
    if (!v.is_number())
      return LineError(file, line, "metric \"" + name + "\" is " + std::string(v.type_name()) + ", not a number");
    out->push_back({*step, name, v.get<double>()});
    return Status::Ok();
  };
  for (const auto& [name, v] : data->items()) KP_RETURN_IF_ERROR(add(name, v));
  if (auto e = j.find("elapsed_seconds"); e != j.end()) KP_RETURN_IF_ERROR(add("elapsed_seconds", *e));
  return Status::Ok();
}

}  // namespace

MetricsChunk ParseVerlMetrics(std::string_view text, const std::string& file, int first_line, int last_step) {
  MetricsChunk c;
  c.next_line = first_line;
  c.last_step = last_step;
  std::size_t at = 0;
  for (;;) {
    const std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) break;  // still being written
    const std::string_view line = text.substr(at, end - at);
    if (!IsBlank(line)) {
      int step = 0;
      std::vector<MetricRecord> metrics;
      c.error = ParseLine(line, file, c.next_line, c.last_step, &step, &metrics);
      if (!c.error.ok()) return c;
      c.metrics.insert(c.metrics.end(), metrics.begin(), metrics.end());
      c.last_step = step;
      ++c.steps;
    }
    at = end + 1;
    c.consumed = at;
    ++c.next_line;
  }
  return c;
}

Result<JobFile> ParseJobFile(std::string_view text, const std::string& path) {
  Result<json> parsed = ParseStrictJson(text, /*allow_comments=*/false);
  if (!parsed.ok() || !parsed->is_object()) return Status::InvalidArgument(path + ": not a kimi-plan job file (JSON)");
  const json& j = *parsed;
  if (j.value("schema", "") != "kimi-plan.job/1")
    return Status::InvalidArgument(path + ": \"schema\" must be \"kimi-plan.job/1\"");
  JobFile f;
  if (auto p = j.find("plan_id"); p != j.end() && !p->is_null()) {
    if (!p->is_number_integer() || p->get<std::int64_t>() <= 0)
      return Status::InvalidArgument(path + ": \"plan_id\" must be a positive integer or null");
    f.plan_id = p->get<std::int64_t>();
  }
  if (auto e = j.find("exit_code"); e != j.end() && !e->is_null()) {
    if (!e->is_number_integer() || e->get<std::int64_t>() < 0 || e->get<std::int64_t>() > 255)
      return Status::InvalidArgument(path + ": \"exit_code\" must be an integer from 0 to 255 or null");
    f.exit_code = e->get<int>();
  }
  for (const auto& [key, field] : {std::pair{"label", &f.label}, {"engine", &f.engine}})
    if (auto v = j.find(key); v != j.end()) {
      if (!v->is_string()) return Status::InvalidArgument(path + ": \"" + key + "\" must be a string");
      *field = v->get<std::string>();
    }
  return f;
}

std::string JobFileJson(std::int64_t plan_id, const std::string& label, const std::string& engine) {
  return json{{"schema", "kimi-plan.job/1"},
              {"plan_id", plan_id > 0 ? json(plan_id) : json(nullptr)},
              {"engine", engine},
              {"label", label},
              {"metrics", kVerlMetricsFileName},
              {"exit_code", nullptr}}
      .dump();
}

}  // namespace kp
