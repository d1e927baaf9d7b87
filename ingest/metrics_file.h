// The files a Verl job launched by `kimi-plan launch --engine verl` leaves
// in its output folder, as `kimi-plan ingest` reads them:
//
// - the metrics file Verl's file logger writes (verl/utils/tracking.py,
//   FileLogger, at the commit launcher/verl_keys.txt pins): one JSON object
//   a line, {"step": N, "data": {"timing_s/step": 12.3, ...}}, written and
//   flushed a line at a time; newer Verl adds "elapsed_seconds". NaN is
//   written as null (orjson).
// - the job file kimi-plan's job script writes beside it (JobFileName):
//   {"schema": "kimi-plan.job/1", "plan_id": N | null, "engine": "verl",
//   "label": "...", "metrics": "verl-metrics.jsonl", "exit_code": null | N},
//   rewritten with the exit code when Verl's trainer returns.
//
// Thread-safety: pure functions.
#ifndef KIMI_PLAN_INGEST_METRICS_FILE_H_
#define KIMI_PLAN_INGEST_METRICS_FILE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "store/store.h"

namespace kp {

/// The metrics file's name in a job's output folder.
inline constexpr const char* kVerlMetricsFileName = "verl-metrics.jsonl";
/// The job file's name, beside the metrics file.
inline constexpr const char* kJobFileName = "kimi-plan-job.json";

/// Complete lines read from a metrics file, and where reading stopped.
struct MetricsChunk {
  std::vector<MetricRecord> metrics;  ///< every number of every good line, in file order
  std::size_t consumed = 0;           ///< bytes of the good lines, their newlines included
  int next_line = 1;                  ///< the number of the first line not consumed
  int last_step = -1;                 ///< the last good line's step (-1: none yet)
  int steps = 0;                      ///< good lines with a step
  /// Ok, or the first bad line: InvalidArgument "FILE:LINE: what is wrong".
  /// Nothing after it is read.
  Status error;
};

/// Reads the complete lines of `text` (each ends in '\n'; an unterminated
/// last line is a line still being written, left for the next read),
/// numbering them from `first_line` and requiring steps after `last_step`.
/// A line is a JSON object with a non-negative integer "step" and an
/// object "data" of metric names to numbers (null: a NaN, skipped); an
/// "elapsed_seconds" number is kept as the metric of that name. Blank lines
/// are skipped. Errors name the file and line: not JSON, no step, a step
/// not after the one before, a metric that is not a number.
MetricsChunk ParseVerlMetrics(std::string_view text, const std::string& file, int first_line, int last_step);

/// What the job file says.
struct JobFile {
  std::int64_t plan_id = 0;       ///< 0: the job names no plan
  std::string label, engine;
  std::optional<int> exit_code;   ///< set once the trainer returned
};

/// Parses a job file's text; InvalidArgument "PATH: what is wrong".
Result<JobFile> ParseJobFile(std::string_view text, const std::string& path);

/// The job file's text (JobFile without an exit code: the job has started).
std::string JobFileJson(std::int64_t plan_id, const std::string& label, const std::string& engine);

}  // namespace kp

#endif  // KIMI_PLAN_INGEST_METRICS_FILE_H_
