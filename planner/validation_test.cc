// The planner against published measurements (tests/validation/
// megatron_runs.json): prints every case's error and holds the means and
// maxima to the fidelity issue's bounds. `kimi-plan validate` prints the
// same table.
#include "planner/validation.h"

#include <cstdio>

#include <gtest/gtest.h>

#include "common/file_system.h"

#ifndef KIMI_PLAN_VALIDATION_CASES
#define KIMI_PLAN_VALIDATION_CASES "tests/validation/megatron_runs.json"
#endif

namespace kp {
namespace {

std::vector<ValidationOutcome> Outcomes() {
  RealFileSystem fs;
  PresetCatalog catalog(fs, DefaultPresetDir());
  Result<std::string> text = fs.ReadFile(KIMI_PLAN_VALIDATION_CASES);
  EXPECT_TRUE(text.ok()) << KIMI_PLAN_VALIDATION_CASES;
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

TEST(ValidationTest, ErrorsAreRelativeToTheMeasurement) {
  ValidationOutcome a{"a", 2.0, 2.2, 50.0, 45.0, ""};
  ValidationOutcome b{"b", 1.0, 0.9, std::nullopt, 3.0, ""};
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
  EXPECT_EQ(ParseValidationCases("{}", catalog).status().message(),
            "validation cases: must be an object with a list \"cases\"");
  auto r = ParseValidationCases(R"({"cases": [{"id": "x", "source": "s"}]})", catalog);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("case x: ", 0), 0u) << r.status().message();
}

}  // namespace
}  // namespace kp
