// The SDPO loop as a discrete-event simulation: the five systems of seed 000
// (rollout generation, feedback, self-teacher scoring, actor training and
// weight sync) on a placement, over several steps, predicting the step time,
// each system's share and how much of the time the GPUs sit idle.
#ifndef KIMI_PLAN_SIMULATOR_SDPO_LOOP_H_
#define KIMI_PLAN_SIMULATOR_SDPO_LOOP_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/units.h"

namespace kp {

enum class LoopSystem { kRollout = 0, kFeedback, kTeacher, kTrain, kSync };
constexpr int kLoopSystems = 5;
const char* LoopSystemName(LoopSystem s);

/// One step's time in each system, each on its own resources.
struct LoopCosts {
  Seconds rollout;   ///< generating every sample of a step on the rollout GPUs
  Seconds feedback;  ///< verifiers / judges on CPU workers
  Seconds teacher;   ///< self-teacher log-probs on the actor GPUs
  Seconds train;     ///< one actor optimizer step
  Seconds sync;      ///< trainer -> rollout weight transfer
  Seconds of(LoopSystem s) const;
};

enum class LoopPlacement {
  kColocated,  ///< every system's GPU work time-shares one pool (Verl's hybrid engine)
  kSplit,      ///< rollout on its own pool; actor and teacher on theirs
};

struct LoopOptions {
  LoopPlacement placement = LoopPlacement::kColocated;
  int actor_gpus = 0;
  int rollout_gpus = 0;     ///< split only; colocated uses actor_gpus for both
  int steps = 6;
  /// Split only: rollout of step k may start from the weights of step k-2
  /// (one step off-policy), so generation overlaps training.
  bool off_policy_overlap = false;
};

/// One system's work on one resource in one step.
struct LoopSpan {
  std::string resource;  ///< "actor GPUs", "rollout GPUs", "GPUs", "CPU workers", "network"
  LoopSystem system;
  int step;
  Nanoseconds start, end;
};

struct LoopResult {
  Seconds step_time;                         ///< steady state: (end of last - end of first) / (steps - 1)
  Seconds makespan;
  std::array<double, kLoopSystems> share{};  ///< each system's time / step time (0 when the step takes none)
  double gpu_idle_fraction = 0;              ///< GPU-seconds not computing / all GPU-seconds (0 when none pass)
  std::vector<LoopSpan> timeline;
  std::uint64_t events = 0;
};

/// Validates and runs the loop. Errors name the field (`--steps`, `--rollout-gpus`).
Result<LoopResult> SimulateLoop(const LoopCosts& costs, const LoopOptions& options);

/// A timeline picture: one row per resource, one box per system and step.
std::string LoopTimelineSvg(const LoopResult& result);

}  // namespace kp

#endif  // KIMI_PLAN_SIMULATOR_SDPO_LOOP_H_
