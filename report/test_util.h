// Hand-made runs for the report's tests.
#ifndef KIMI_PLAN_REPORT_TEST_UTIL_H_
#define KIMI_PLAN_REPORT_TEST_UTIL_H_

#include <optional>
#include <string>
#include <vector>

#include "report/run_data.h"

namespace kp::testing {

/// A run whose steps table has the columns `names`, `columns[c][i]` at `steps[i]`.
inline RunData MakeRun(std::int64_t id, const std::vector<int>& steps, const std::vector<std::string>& names,
                       const std::vector<std::vector<std::optional<double>>>& columns) {
  RunData r;
  r.run.id = id;
  r.run.kind = "train";
  r.run.model = "m";
  r.run.created_at = "2026-01-01T00:00:00Z";
  r.run.config_json = "{}";
  r.steps.steps = steps;
  r.steps.names = names;
  r.steps.values = columns;
  return r;
}

/// loss and grad_norm at the given steps.
inline RunData LossRun(std::int64_t id, const std::vector<int>& steps, const std::vector<double>& loss,
                       const std::vector<double>& grad_norm) {
  std::vector<std::optional<double>> l(loss.begin(), loss.end()), g(grad_norm.begin(), grad_norm.end());
  return MakeRun(id, steps, {"loss", "grad_norm"}, {l, g});
}

}  // namespace kp::testing

#endif  // KIMI_PLAN_REPORT_TEST_UTIL_H_
