// The planner held to published measurements: a case file of measured
// Megatron-LM runs (tests/validation/megatron_runs.json, format in
// docs/benchmarks.md "Validation"), each turned into a plan request and
// evaluated, its predicted step time and worst-rank memory set beside what
// was measured. `kimi-plan validate` prints the table; the validation test
// holds the errors to the bounds.
#ifndef KIMI_PLAN_PLANNER_VALIDATION_H_
#define KIMI_PLAN_PLANNER_VALIDATION_H_

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "planner/plan_request.h"
#include "specs/presets.h"

namespace kp {

struct ValidationCase {
  std::string id;
  std::string source;
  PlanRequest request;
  std::optional<double> step_time_s;   ///< measured, or derived from measured throughput
  std::string step_time_kind;          ///< "measured" or "derived"
  std::optional<double> memory_gb;     ///< measured peak per GPU (decimal GB)
  bool moe = false;                    ///< an MoE model: summarised apart from the dense GPTs
};

/// Reads the case file, resolving each case's GPU (and its calibration table)
/// from `catalog`. InvalidArgument naming the case and field.
Result<std::vector<ValidationCase>> ParseValidationCases(const std::string& json_text, const PresetCatalog& catalog);

struct ValidationOutcome {
  std::string id;
  bool moe = false;
  /// Whether the planner judged the actor to fit the GPU (every published
  /// run did).
  bool fits = false;
  std::optional<double> step_measured, step_predicted;
  std::optional<double> memory_measured, memory_predicted;  ///< GB
  std::string error;  ///< non-empty when the planner refused the case
  /// predicted / measured - 1, when both exist.
  std::optional<double> StepError() const;
  std::optional<double> MemoryError() const;
};

std::vector<ValidationOutcome> RunValidation(const std::vector<ValidationCase>& cases);

/// Mean and max of |error| over the cases that have one.
struct ErrorSummary {
  int cases = 0;
  double mean = 0, max = 0;
  std::string worst;
};
ErrorSummary SummariseStep(const std::vector<ValidationOutcome>& outcomes);
ErrorSummary SummariseMemory(const std::vector<ValidationOutcome>& outcomes);
/// The outcomes of the dense (moe false) or the MoE (true) cases.
std::vector<ValidationOutcome> OutcomesOfKind(const std::vector<ValidationOutcome>& outcomes, bool moe);

}  // namespace kp

#endif  // KIMI_PLAN_PLANNER_VALIDATION_H_
