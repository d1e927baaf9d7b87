// The pipeline schedules the project knows by name. Shared by the planner
// (closed forms), the simulator (generators) and the runtime (execution).
#ifndef KIMI_PLAN_SPECS_SCHEDULE_KIND_H_
#define KIMI_PLAN_SPECS_SCHEDULE_KIND_H_

#include <string>
#include <vector>

#include "common/status.h"

namespace kp {

enum class ScheduleKind { kGpipe, k1F1B, kInterleaved1F1B, kZbH1, kZbH2, kZbv, kDualPipeV };

const char* ScheduleName(ScheduleKind k);
/// Parses "gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zbv", "dualpipev".
Result<ScheduleKind> ParseSchedule(const std::string& name, const std::string& field = "--schedule");
std::vector<std::string> ScheduleNames();

/// Stages per rank the schedule puts on each rank: 1, or v for the
/// interleaved schedule, or exactly 2 for the V-shaped ones.
bool ScheduleTakesVp(ScheduleKind k);
bool ScheduleIsVShaped(ScheduleKind k);
/// Whether the schedule splits backward into B (inputs) and W (weights).
bool ScheduleSplitsW(ScheduleKind k);

}  // namespace kp

#endif  // KIMI_PLAN_SPECS_SCHEDULE_KIND_H_
