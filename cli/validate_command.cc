// `kimi-plan validate`: the planner against published measurements. Reads
// the case file (default: the one the build was made from,
// tests/validation/megatron_runs.json), evaluates each case and prints its
// predicted and measured step time and worst-rank memory with the error,
// then the mean and max errors. Reads only; writes nothing.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/log.h"
#include "cli/options.h"
#include "common/limits.h"
#include "common/table.h"
#include "common/text.h"
#include "planner/validation.h"
#include "planner/validation_search.h"


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
          {"refused", o.error.empty() ? json(nullptr) : json(o.error)}, {"kind", o.moe ? "moe" : "dense"},
          {"fits", o.error.empty() ? json(o.fits) : json(nullptr)}};
}

// The cases of every file, in order; errors name the file.
Result<std::vector<ValidationCase>> ReadCases(const std::vector<std::string>& paths, const CliEnv& env) {
  PresetCatalog catalog(env.fs, env.data.presets);
  std::vector<ValidationCase> all;
  for (const std::string& path : paths) {
    Result<std::string> text = env.fs.ReadFile(path, limits::kMaxSpecFileBytes);
    if (!text.ok()) return text.status().WithContext("--cases");
    Result<std::vector<ValidationCase>> cases = ParseValidationCases(*text, catalog);
    if (!cases.ok()) return Status::InvalidArgument("--cases: " + path + ": " + cases.status().message());
    all.insert(all.end(), cases->begin(), cases->end());
  }
  return all;
}

// The cases the planner refused, and those it judged not to fit.
struct Verdicts {
  int refused = 0, not_fitting = 0;
};

Verdicts VerdictsOf(const std::vector<ValidationOutcome>& outcomes) {
  Verdicts v;
  for (const ValidationOutcome& o : outcomes) {
    v.refused += !o.error.empty();
    v.not_fitting += o.error.empty() && !o.fits;
  }
  return v;
}

void PrintSummary(std::ostream& out, const char* kind, const std::vector<ValidationOutcome>& outcomes) {
  if (outcomes.empty()) return;
  const ErrorSummary step = SummariseStep(outcomes), memory = SummariseMemory(outcomes);
  const Verdicts v = VerdictsOf(outcomes);
  out << kind << " step time: " << step.cases << " cases, mean |error| " << FormatFixed(step.mean * 100, 1)
      << "%, max " << FormatFixed(step.max * 100, 1) << "% (" << step.worst << ")\n";
  if (memory.cases > 0)
    out << kind << " memory:    " << memory.cases << " cases, mean |error| " << FormatFixed(memory.mean * 100, 1)
        << "%, max " << FormatFixed(memory.max * 100, 1) << "% (" << memory.worst << ")\n";
  out << kind << " verdicts:  " << v.refused << " refused, " << v.not_fitting << " judged not to fit, of "
      << outcomes.size() << " runs that ran\n";
}

json KindJson(const std::vector<ValidationOutcome>& outcomes) {
  const Verdicts v = VerdictsOf(outcomes);
  return {{"step_time", SummaryJson(SummariseStep(outcomes))},
          {"memory", SummaryJson(SummariseMemory(outcomes))},
          {"refused", v.refused},
          {"judged_not_to_fit", v.not_fitting}};
}

std::string LayoutText(const ParallelPlan& p, ScheduleKind schedule) {
  return "tp" + std::to_string(p.tp) + " pp" + std::to_string(p.pp) + " vp" + std::to_string(p.vp) + " ep" +
         std::to_string(p.ep) + " etp" + std::to_string(p.etp) + " cp" + std::to_string(p.cp) + " " +
         ScheduleName(schedule);
}

// --search: the MoE cases' layouts ranked (planner/validation_search.h).
Status PrintSearchChecks(const std::vector<ValidationCase>& cases, int top, bool as_json, CliEnv& env) {
  json rows = json::array();
  Table t({"case", "fitting layouts", "published rank", "published s", "fastest fitting", "its s", "earns keep"});
  int n = 0, kept = 0, total = 0;
  for (const ValidationCase& c : cases) total += c.moe;
  for (const ValidationCase& c : cases) {
    if (!c.moe) continue;
    Progress(env, "search " + std::to_string(++n) + "/" + std::to_string(total) + ": " + c.id);
    KP_ASSIGN_OR_RETURN(const SearchCheck s, CheckSearch(c));
    kept += s.EarnsKeep(top);
    const std::string best =
        s.fitting > 0 ? LayoutText(s.best, s.best_schedule) + " " + DispatcherName(s.best_dispatcher) +
                            (s.best_a2a_overlap ? " overlap" : "")
                      : "-";
    t.AddRow({s.id, std::to_string(s.fitting), s.published_rank ? std::to_string(s.published_rank) : "does not fit",
              FormatFixed(s.published_step_s, 2), best, s.fitting > 0 ? FormatFixed(s.best_step_s, 2) : "-",
              s.EarnsKeep(top) ? "yes" : "NO"});
    rows.push_back({{"id", s.id}, {"fitting_layouts", s.fitting},
                    {"published_rank", s.published_rank ? json(s.published_rank) : json(nullptr)},
                    {"published_step_s", s.published_step_s}, {"fastest_fitting", best},
                    {"fastest_fitting_step_s", s.fitting > 0 ? json(s.best_step_s) : json(nullptr)},
                    {"earns_keep", s.EarnsKeep(top)}});
  }
  if (as_json) {
    env.out << json{{"schema", "kimi-plan.validate-search/1"}, {"top", top}, {"cases", rows}, {"earn_keep", kept}}.dump(1)
            << "\n";
    return Status::Ok();
  }
  env.out << t.Render();
  env.out << "the search lists the published layout, or a faster one that fits, in its top " << top << " on " << kept
          << " of " << total << " MoE cases\n";
  return Status::Ok();
}

}  // namespace

Status ValidateCommand(const std::vector<std::string>& args, CliEnv& env) {
  po::options_description desc(
      "kimi-plan validate [--cases FILE]... [--only PREFIX] [--search [--top N]] [--json]\n\n"
      "The planner's step time and worst-rank memory against published, measured Megatron-LM runs, dense\n"
      "and MoE reported apart (docs/benchmarks.md, \"Validation\"). Options");
  desc.add_options()("help,h", "this text")
      ("cases", po::value<std::vector<std::string>>()->composing(),
       "a case file (repeat for several; default: the dense GPT runs and the MoE runs the build was made from)")
      ("only", po::value<std::string>(), "only the cases whose id starts with this")
      ("search", "instead: for each MoE case, every layout of its cluster under every dispatcher, with the "
                 "exchange overlapped or not, ranked; does the top list the published layout or a faster one that fits?")
      ("top", IntFlag(1, 1000), "with --search: how many count as the top (default 5)")
      ("json", "print JSON instead of a table");
  po::variables_map vm;
  KP_ASSIGN_OR_RETURN(const bool proceed, ParseCommand(args, desc, &vm, env.out));
  if (!proceed) return Status::Ok();
  const std::vector<std::string> paths =
      vm.count("cases") ? vm["cases"].as<std::vector<std::string>>() : env.data.validation_cases;
  KP_ASSIGN_OR_RETURN(std::vector<ValidationCase> selected, ReadCases(paths, env));
  if (vm.count("only")) {
    const std::string prefix = vm["only"].as<std::string>();
    std::erase_if(selected, [&](const ValidationCase& c) { return c.id.rfind(prefix, 0) != 0; });
    if (selected.empty())
      return Status::InvalidArgument("--only: no case id starts with \"" + QuoteBounded(prefix) + "\"");
  }
  KP_RETURN_IF_ERROR(FlagNeeds(vm, "top", vm.count("search") > 0, "--search"));
  if (vm.count("search")) return PrintSearchChecks(selected, vm.count("top") ? vm["top"].as<int>() : 5, vm.count("json") > 0, env);
  const std::vector<ValidationOutcome> outcomes = RunValidation(selected);
  const std::vector<ValidationOutcome> dense = OutcomesOfKind(outcomes, false), moe = OutcomesOfKind(outcomes, true);
  if (vm.count("json")) {
    json rows = json::array();
    for (const ValidationOutcome& o : outcomes) rows.push_back(OutcomeJson(o));
    env.out << json{{"schema", "kimi-plan.validate/2"}, {"cases", rows}, {"dense", KindJson(dense)},
                    {"moe", KindJson(moe)}}.dump(1)
            << "\n";
    return Status::Ok();
  }
  Table t({"case", "kind", "step measured s", "predicted s", "error", "memory measured GB", "predicted GB", "error",
           "fits"});
  for (const ValidationOutcome& o : outcomes) {
    const char* kind = o.moe ? "MoE" : "dense";
    if (!o.error.empty()) {
      t.AddRow({o.id, kind, "refused: " + o.error, "", "", "", "", "", ""});
      continue;
    }
    t.AddRow({o.id, kind, Cell(o.step_measured, 3), Cell(o.step_predicted, 3), Percent(o.StepError()),
              Cell(o.memory_measured, 1), Cell(o.memory_predicted, 1), Percent(o.MemoryError()), o.fits ? "yes" : "NO"});
  }
  env.out << t.Render();
  PrintSummary(env.out, "dense", dense);
  PrintSummary(env.out, "MoE", moe);
  return Status::Ok();
}

}  // namespace kp
