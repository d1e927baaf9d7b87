// Gantt charts of a simulated pipeline step: one row per rank, one box per
// compute action (F blue, I teal, W green, B orange; later stages of a rank
// paler), labelled with the action when the box is wide enough, over a time
// axis in microseconds.
//
// Thread-safety: pure functions.
#ifndef KIMI_PLAN_SIMULATOR_GANTT_H_
#define KIMI_PLAN_SIMULATOR_GANTT_H_

#include <string>

#include "schedules/pipeline_schedule.h"
#include "simulator/pipeline_sim.h"

namespace kp {

/// A standalone SVG document of `result.timeline` (needs a recorded timeline).
std::string GanttSvg(const PipelineSimResult& result, const PipelineSchedule& schedule);

/// A self-contained HTML page: the schedule's name, makespan and bubble,
/// and the SVG inline (no external resources).
std::string GanttHtml(const PipelineSimResult& result, const PipelineSchedule& schedule);

}  // namespace kp

#endif  // KIMI_PLAN_SIMULATOR_GANTT_H_
