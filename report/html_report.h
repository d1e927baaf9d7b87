// The one-page HTML report (`kimi-plan report --html FILE`): every picture
// inline SVG, the styles in the page, no script and no external resource,
// so the file renders anywhere it is copied.
//
// Thread-safety: pure functions.
#ifndef KIMI_PLAN_REPORT_HTML_REPORT_H_
#define KIMI_PLAN_REPORT_HTML_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "report/compare.h"
#include "report/run_data.h"
#include "report/summary.h"
#include "report/svg_plot.h"
#include "store/store.h"

namespace kp {

/// One curve per run that logs `metric` (non-NULL values only), labelled
/// "run ID (model)".
std::vector<PlotSeries> MetricSeries(const std::vector<RunData>& runs, const std::string& metric);

/// The plan's memory per GPU as bars: one per role present in
/// result_json.memory (actor, reference, rollout), segments weights, grads,
/// optimizer, activations, other (bytes). InvalidArgument naming `--plan`
/// when the plan's JSON has no memory breakdown.
Result<std::vector<Bar>> MemoryBars(const PlanRecord& plan);
/// The GPU's capacity the plan was sized against (memory.actor.capacity_bytes),
/// labelled "h200: 141.0 GB"; nullopt when the plan's JSON has none.
std::optional<BarMark> CapacityMark(const PlanRecord& plan);

/// Re-runs a recorded pipeline simulation from its request_json (schedule,
/// pp, vp, microbatches, f/b/w/p2p microseconds) and draws its Gantt chart.
/// Transfers are the recorded p2p time on every hop: a plan whose hops carry
/// attention-residual blocks of different sizes (attnres_cache set) is drawn
/// with the hidden-state hop alone, and the caption says so with both
/// makespans. A request that replayed a CSV file cannot be redrawn.
struct GanttFigure {
  std::string svg;
  std::string caption;
};
Result<GanttFigure> PipelineGantt(const SimulationRecord& sim);

/// Two bars per sync simulation (TCP and RDMA total seconds), labelled
/// "#ID model mode".
std::vector<Bar> SyncBars(const std::vector<SimulationRecord>& syncs);

/// What the page shows; absent parts are left out.
struct HtmlReportInput {
  std::string title;
  std::vector<RunListEntry> run_list;
  std::vector<RunData> runs;  ///< plotted: loss, reward when any run logs it, grad norm
  std::optional<Comparison> comparison;
  std::vector<std::pair<std::int64_t, std::vector<PredictionRow>>> predictions;
  std::optional<PlanRecord> plan;               ///< memory bars
  std::optional<SimulationRecord> pipeline;     ///< Gantt chart
  std::vector<SimulationRecord> syncs;          ///< sync times
};

/// The page. Errors come from the parts (MemoryBars, PipelineGantt).
Result<std::string> HtmlReport(const HtmlReportInput& in);

}  // namespace kp

#endif  // KIMI_PLAN_REPORT_HTML_REPORT_H_
