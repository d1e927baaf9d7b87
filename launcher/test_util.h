// Shared fixtures of the launcher tests: the seed topologies as evaluated
// plans, and the repository's Verl key list.
#ifndef KIMI_PLAN_LAUNCHER_TEST_UTIL_H_
#define KIMI_PLAN_LAUNCHER_TEST_UTIL_H_

#include <gtest/gtest.h>

#include "common/file_system.h"
#include "common/limits.h"
#include "launcher/launch_spec.h"
#include "launcher/verl_overrides.h"
#include "planner/test_util.h"

namespace kp::testing {

/// The seed's topologies as presets/topologies/*.json describe them.
inline PlanRequest SeedTopology(const std::string& preset) {
  if (preset == "h200-full") {
    PlanRequest r = SeedRequest("kimi-k2.6", "h200", 16);
    r.plan = ParallelPlan{8, 2, 1, 8, 1, 1, 8, 8, 8, 1};
    return r;
  }
  if (preset == "b200-full") {
    PlanRequest r = SeedRequest("kimi-k2.6", "b200", 8);
    r.plan = ParallelPlan{8, 1, 1, 8, 1, 1, 8, 8, 8, 1};
    return r;
  }
  EXPECT_EQ(preset, "h200-lora");
  PlanRequest r = SeedRequest("kimi-k2.6", "h200", 2);
  r.mode = TrainMode::kLora;
  r.lora.rank = 32;
  r.lora.alpha = 64;
  r.plan = ParallelPlan{4, 1, 1, 4, 1, 1, 4, 8, 8, 1};
  return r;
}

/// A launch of `r` as the planner evaluates it, named like the CLI names a preset.
inline Launch MakeLaunch(const PlanRequest& r, const std::string& label, LaunchTarget target, LaunchEngine engine) {
  auto e = PlanFixed(r, CountParams(r.model));
  EXPECT_TRUE(e.ok()) << e.status().message();
  Launch l{r, e.ok() ? *e : PlanEvaluation{}, LaunchOptions{}};
  l.options.target = target;
  l.options.engine = engine;
  l.options.label = label;
  l.options.source = "--preset " + label;
  return l;
}

/// `r` with the states the native runtime executes (native_run.h): fp32,
/// without the distributed optimizer.
inline PlanRequest NativeStates(PlanRequest r) {
  r.distributed_optimizer = false;
  r.state_precision = StatePrecision::kFp32;
  return r;
}

/// A seed preset launched with --force, as the seeds do not fit; for the
/// native engine planned with NativeStates.
inline Launch SeedLaunch(const std::string& preset, LaunchTarget target, LaunchEngine engine) {
  const PlanRequest r = SeedTopology(preset);
  Launch l = MakeLaunch(engine == LaunchEngine::kNative ? NativeStates(r) : r, preset, target, engine);
  l.options.force = true;
  return l;
}

/// The source tree's Verl key list (the tests' build defines its path).
inline std::string RepoVerlKeysPath() { return KIMI_PLAN_VERL_KEYS; }

inline VerlKeys RepoVerlKeys() {
  RealFileSystem fs;
  auto text = fs.ReadFile(RepoVerlKeysPath(), limits::kMaxSpecFileBytes);
  EXPECT_TRUE(text.ok()) << text.status().message();
  auto keys = VerlKeys::Parse(text.ok() ? *text : "", RepoVerlKeysPath());
  EXPECT_TRUE(keys.ok()) << keys.status().message();
  return keys.ok() ? *keys : VerlKeys();
}

}  // namespace kp::testing

#endif  // KIMI_PLAN_LAUNCHER_TEST_UTIL_H_
