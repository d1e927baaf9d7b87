// The comparison table of seed 003: runs against a reference run, one
// column per (metric, step); each cell holds the run's raw value and,
// beneath it, its change against the reference: `identical` when the two
// doubles are bitwise equal, else the signed relative change with two
// decimals ("+0.72%", "-0.09%"; "-0.00%" for a change under half a
// hundredth of a percent).
//
// Thread-safety: pure functions.
#ifndef KIMI_PLAN_REPORT_COMPARE_H_
#define KIMI_PLAN_REPORT_COMPARE_H_

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "report/run_data.h"

namespace kp {

/// "1,10,50,100" -> {1, 10, 50, 100}: positive integers, comma separated,
/// no duplicates. Errors name `--steps`.
Result<std::vector<int>> ParseSteps(const std::string& text);
/// "loss,grad_norm" -> {"loss", "grad_norm"}: non-empty names, no
/// duplicates. Errors name `--metric`. Whether a name is a column is
/// checked by Compare.
Result<std::vector<std::string>> ParseMetrics(const std::string& text);

/// The change of `value` against `reference`: "identical" when the doubles
/// are bitwise equal; "+x.xx%" / "-x.xx%" = 100 (value - reference) /
/// |reference|; "n/a" when the reference is 0 and the value is not.
std::string ChangeText(double value, double reference);

/// The default steps when none are given: those of 1, 10, 50, 100 the
/// reference logged, and its last step.
std::vector<int> DefaultSteps(const RunData& reference);

struct CompareCell {
  std::string metric;
  int step = 0;
  std::optional<double> value;      ///< nullopt: the run did not log it
  std::optional<double> reference;  ///< the reference's value at the same step
  std::string change;               ///< ChangeText, "" for the reference row, "-" when either is missing
};

struct CompareRow {
  std::int64_t run_id = 0;
  std::string label;          ///< "run 3 (kimi-k3-debug)"
  bool is_reference = false;  ///< the first row
  std::vector<CompareCell> cells;  ///< metric-major: every step of metric 0, then metric 1
};

struct Comparison {
  std::vector<std::string> metrics;
  std::vector<int> steps;
  std::vector<CompareRow> rows;  ///< the reference first, then the runs in the order given
};

/// Builds the table. `steps` empty: DefaultSteps(reference). A metric that is
/// not a column of the steps table is an error naming `--metric` and the
/// columns there are.
Result<Comparison> Compare(const RunData& reference, const std::vector<RunData>& runs,
                           const std::vector<std::string>& metrics, std::vector<int> steps);

/// Plain text: a header "loss, step 1 | step 10 ... | grad norm, step 1 ...",
/// per run one line of values and, beneath it, one line of changes.
std::string RenderComparison(const Comparison& c);
/// One line per cell: run_id,label,reference,metric,step,value,reference_value,change
/// (values with 17 significant digits, empty when missing).
std::string ComparisonCsv(const Comparison& c);
/// {"reference", "metrics", "steps", "rows": [{"run_id", "label", "reference",
///  "cells": [{"metric", "step", "value", "reference_value", "change"}]}]}
nlohmann::json ComparisonJson(const Comparison& c);


}  // namespace kp

#endif  // KIMI_PLAN_REPORT_COMPARE_H_
