// The planner against published measurements (tests/validation/
// megatron_runs.json): prints every case's error and holds the means and
// maxima to the fidelity issue's bounds. `kimi-plan validate` prints the
// same table.
#include "planner/validation.h"

#include <cstdio>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_system.h"
#include "common/limits.h"

#ifndef KIMI_PLAN_VALIDATION_CASES
#define KIMI_PLAN_VALIDATION_CASES "tests/validation/megatron_runs.json"
#endif
#ifndef KIMI_PLAN_MOE_VALIDATION_CASES
#define KIMI_PLAN_MOE_VALIDATION_CASES "tests/validation/megatron_moe_runs.json"
#endif

namespace kp {
namespace {

std::vector<ValidationOutcome> Outcomes(const char* path = KIMI_PLAN_VALIDATION_CASES) {
  RealFileSystem fs;
  PresetCatalog catalog(fs, DefaultPresetDir());
  Result<std::string> text = fs.ReadFile(path, limits::kMaxSpecFileBytes);
  EXPECT_TRUE(text.ok()) << path;
  if (!text.ok()) return {};
  Result<std::vector<ValidationCase>> cases = ParseValidationCases(*text, catalog);
  EXPECT_TRUE(cases.ok()) << cases.status().message();
  if (!cases.ok()) return {};
  return RunValidation(*cases);
}

TEST(ValidationTest, PublishedMegatronRunsWithinTheBounds) {
  const std::vector<ValidationOutcome> outcomes = Outcomes();
  ASSERT_GE(outcomes.size(), 60u);
  for (const ValidationOutcome& o : outcomes) {
    EXPECT_TRUE(o.error.empty()) << o.id << ": " << o.error;
    std::printf("%-44s step %8.3f s predicted %8.3f s %+6.1f%%", o.id.c_str(), o.step_measured.value_or(0),
                o.step_predicted.value_or(0), o.StepError().value_or(0) * 100);
    if (o.MemoryError()) std::printf("  memory %5.1f GB predicted %5.1f GB %+6.1f%%", *o.memory_measured,
                                     *o.memory_predicted, *o.MemoryError() * 100);
    std::printf("\n");
  }
  const ErrorSummary step = SummariseStep(outcomes), memory = SummariseMemory(outcomes);
  std::printf("step time: %d cases, mean %.1f%%, max %.1f%% (%s)\n", step.cases, step.mean * 100, step.max * 100,
              step.worst.c_str());
  std::printf("memory:    %d cases, mean %.1f%%, max %.1f%% (%s)\n", memory.cases, memory.mean * 100,
              memory.max * 100, memory.worst.c_str());
  EXPECT_GE(step.cases, 60);
  EXPECT_GE(memory.cases, 40);
  // The fidelity issue's bounds: step time 8% mean, 15% max; memory 5% mean,
  // 10% max.
  EXPECT_LE(step.mean, 0.08);
  EXPECT_LE(step.max, 0.15);
  EXPECT_LE(memory.mean, 0.05);
  EXPECT_LE(memory.max, 0.10);
}

// Published Megatron-Core MoE runs (tests/validation/megatron_moe_runs.json):
// every one plans, fits, and the step time holds to the fidelity issue's
// bounds, 10% mean and 20% max (docs/benchmarks.md: 8.0% and 16.4%).
TEST(ValidationTest, PublishedMoeRunsPlanFitAndWithinTheBounds) {
  const std::vector<ValidationOutcome> outcomes = Outcomes(KIMI_PLAN_MOE_VALIDATION_CASES);
  ASSERT_GE(outcomes.size(), 20u);
  for (const ValidationOutcome& o : outcomes) {
    EXPECT_TRUE(o.moe) << o.id;
    EXPECT_TRUE(o.error.empty()) << o.id << ": " << o.error;
    EXPECT_TRUE(o.fits) << o.id << " ran, and is judged not to fit";
    std::printf("%-76s step %8.3f s predicted %8.3f s %+6.1f%%\n", o.id.c_str(), o.step_measured.value_or(0),
                o.step_predicted.value_or(0), o.StepError().value_or(0) * 100);
  }
  const ErrorSummary step = SummariseStep(outcomes);
  std::printf("MoE step time: %d cases, mean %.1f%%, max %.1f%% (%s)\n", step.cases, step.mean * 100,
              step.max * 100, step.worst.c_str());
  EXPECT_LE(step.mean, 0.10);
  EXPECT_LE(step.max, 0.20);
}

TEST(ValidationTest, ErrorsAreRelativeToTheMeasurement) {
  ValidationOutcome a{"a", false, true, 2.0, 2.2, 50.0, 45.0, ""};
  ValidationOutcome b{"b", false, true, 1.0, 0.9, std::nullopt, 3.0, ""};
  EXPECT_NEAR(*a.StepError(), 0.1, 1e-12);
  EXPECT_NEAR(*a.MemoryError(), -0.1, 1e-12);
  EXPECT_FALSE(b.MemoryError().has_value());
  const ErrorSummary s = SummariseStep({a, b});
  EXPECT_EQ(s.cases, 2);
  EXPECT_NEAR(s.mean, 0.1, 1e-12);
  EXPECT_NEAR(s.max, 0.1, 1e-12);
}

TEST(ValidationTest, ACaseFileWithoutCasesIsRefused) {
  RealFileSystem fs;
  PresetCatalog catalog(fs, DefaultPresetDir());
  EXPECT_EQ(ParseValidationCases("{}", catalog).status().message(), "schema: required field is missing");
  EXPECT_EQ(ParseValidationCases(R"({"schema": "kimi-plan.validation/1"})", catalog).status().message(),
            "cases: required field is missing");
  auto r = ParseValidationCases(R"({"schema": "kimi-plan.validation/1", "cases": [{"id": "x", "source": "s"}]})",
                                catalog);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "cases[0]: model: required field is missing");
}

// The case reader is as strict as the preset reader (issue 28): one case of
// the shipped file with one field spoiled at a time.
TEST(ValidationTest, CaseFieldsAreReadStrictly) {
  RealFileSystem fs;
  PresetCatalog catalog(fs, DefaultPresetDir());
  Result<std::string> text = fs.ReadFile(KIMI_PLAN_VALIDATION_CASES, limits::kMaxSpecFileBytes);
  ASSERT_TRUE(text.ok());
  nlohmann::json doc = nlohmann::json::parse(*text);
  const nlohmann::json first = doc["cases"][0];
  auto with = [&](const std::string& pointer, const nlohmann::json& value) {
    nlohmann::json one = doc;
    one["cases"] = nlohmann::json::array({first});
    one["cases"][0][nlohmann::json::json_pointer(pointer)] = value;
    return ParseValidationCases(one.dump(), catalog).status().message();
  };
  EXPECT_EQ(with("/model/layers", 4294967344ULL), "cases[0]: model.layers: must be at most 100000, got 4294967344");
  EXPECT_EQ(with("/model/hidden", 6144.7), "cases[0]: model.hidden: must be an integer from 1 to 1048576");
  EXPECT_EQ(with("/gpus", 0), "cases[0]: gpus: must be a positive integer, got 0 (at most 1048576)");
  EXPECT_EQ(with("/gpus", 16), "cases[0]: gpus: 16 is not tp x pp x cp x dp = 8");
  EXPECT_EQ(with("/step_time_s/value", 0), "cases[0]: step_time_s.value: must be > 0, got 0");
  EXPECT_EQ(with("/model/dropuot", true), "cases[0]: model.dropuot: unknown field");
  EXPECT_EQ(with("/id", "a\nb").rfind("cases[0]: id: must be 1 to 128 printable ASCII", 0), 0u);
  // A key named twice, and an id used twice.
  std::string dup = doc.dump();
  dup.insert(dup.find("\"gpus\":"), "\"gpus\": 8, ");
  EXPECT_EQ(ParseValidationCases(dup, catalog).status().message(),
            "cases.gpus: the key is named twice (each field may appear once)");
  nlohmann::json twice = doc;
  twice["cases"] = nlohmann::json::array({first, first});
  EXPECT_EQ(ParseValidationCases(twice.dump(), catalog).status().message(),
            "cases[1]: id \"" + first["id"].get<std::string>() + "\" is used twice");
}

}  // namespace
}  // namespace kp
