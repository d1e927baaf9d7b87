// `kimi-plan validate`: the planner against published measurements. Reads
// the case file (default: the one the build was made from,
// tests/validation/megatron_runs.json), evaluates each case and prints its
// predicted and measured step time and worst-rank memory with the error,
// then the mean and max errors. Reads only; writes nothing.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/options.h"
#include "common/limits.h"
#include "common/table.h"
#include "planner/validation.h"

#ifndef KIMI_PLAN_VALIDATION_CASES
#define KIMI_PLAN_VALIDATION_CASES "tests/validation/megatron_runs.json"
#endif

namespace kp {

namespace {

using nlohmann::json;

std::string Cell(const std::optional<double>& v, int digits) { return v ? FormatFixed(*v, digits) : "-"; }

std::string Percent(const std::optional<double>& e) {
  if (!e) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", *e * 100);
  return buf;
}

json SummaryJson(const ErrorSummary& s) {
  return {{"cases", s.cases}, {"mean_abs_error", s.mean}, {"max_abs_error", s.max}, {"worst", s.worst}};
}

json OutcomeJson(const ValidationOutcome& o) {
  auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  return {{"id", o.id}, {"step_time_s", {{"measured", opt(o.step_measured)}, {"predicted", opt(o.step_predicted)},
                                          {"error", opt(o.StepError())}}},
          {"memory_gb", {{"measured", opt(o.memory_measured)}, {"predicted", opt(o.memory_predicted)},
                         {"error", opt(o.MemoryError())}}},
          {"refused", o.error.empty() ? json(nullptr) : json(o.error)}};
}

}  // namespace

Status ValidateCommand(const std::vector<std::string>& args, CliEnv& env) {
  po::options_description desc(
      "kimi-plan validate [--cases FILE] [--only PREFIX] [--json]\n\n"
      "The planner's step time and worst-rank memory against published, measured Megatron-LM runs\n"
      "(docs/benchmarks.md, \"Validation\"). Options");
  desc.add_options()("help,h", "this text")
      ("cases", po::value<std::string>()->default_value(KIMI_PLAN_VALIDATION_CASES), "the case file")
      ("only", po::value<std::string>(), "only the cases whose id starts with this")
      ("json", "print JSON instead of a table");
  po::variables_map vm;
  KP_ASSIGN_OR_RETURN(const bool proceed, ParseCommand(args, desc, &vm, env.out));
  if (!proceed) return Status::Ok();
  const std::string path = vm["cases"].as<std::string>();
  Result<std::string> text = env.fs.ReadFile(path, limits::kMaxSpecFileBytes);
  if (!text.ok()) return text.status().WithContext("--cases");
  PresetCatalog catalog(env.fs, env.preset_dir);
  Result<std::vector<ValidationCase>> cases = ParseValidationCases(*text, catalog);
  if (!cases.ok()) return Status::InvalidArgument("--cases: " + path + ": " + cases.status().message());
  std::vector<ValidationCase> selected = *cases;
  if (vm.count("only")) {
    const std::string prefix = vm["only"].as<std::string>();
    std::erase_if(selected, [&](const ValidationCase& c) { return c.id.rfind(prefix, 0) != 0; });
    if (selected.empty()) return Status::InvalidArgument("--only: no case id starts with \"" + prefix + "\"");
  }
  const std::vector<ValidationOutcome> outcomes = RunValidation(selected);
  const ErrorSummary step = SummariseStep(outcomes), memory = SummariseMemory(outcomes);
  if (vm.count("json")) {
    json rows = json::array();
    for (const ValidationOutcome& o : outcomes) rows.push_back(OutcomeJson(o));
    env.out << json{{"schema", "kimi-plan.validate/1"}, {"cases", rows}, {"step_time", SummaryJson(step)},
                    {"memory", SummaryJson(memory)}}.dump(1)
            << "\n";
    return Status::Ok();
  }
  Table t({"case", "step measured s", "predicted s", "error", "memory measured GB", "predicted GB", "error"});
  for (const ValidationOutcome& o : outcomes) {
    if (!o.error.empty()) {
      t.AddRow({o.id, "refused: " + o.error, "", "", "", "", ""});
      continue;
    }
    t.AddRow({o.id, Cell(o.step_measured, 3), Cell(o.step_predicted, 3), Percent(o.StepError()),
              Cell(o.memory_measured, 1), Cell(o.memory_predicted, 1), Percent(o.MemoryError())});
  }
  env.out << t.Render();
  env.out << "step time: " << step.cases << " cases, mean |error| " << FormatFixed(step.mean * 100, 1)
          << "%, max " << FormatFixed(step.max * 100, 1) << "% (" << step.worst << ")\n";
  env.out << "memory:    " << memory.cases << " cases, mean |error| " << FormatFixed(memory.mean * 100, 1)
          << "%, max " << FormatFixed(memory.max * 100, 1) << "% (" << memory.worst << ")\n";
  return Status::Ok();
}

}  // namespace kp
