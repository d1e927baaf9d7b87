// Benchmarks (never timed tests). Each prints one line that goes into
// docs/benchmarks.md with the command and the machine:
//   kimi-plan-bench search [NODES]   the plan search for kimi-k2.6 on NODES x 8 H200
//   kimi-plan-bench loop [NODES]     one SDPO step of kimi-k2.6 on NODES x 8 H200, priced and simulated
//   kimi-plan-bench pipeline [PP VP M]  the discrete-event run of one interleaved 1F1B step
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>

#include "bench/bench_options.h"
#include "common/clock.h"
#include "common/file_system.h"
#include "planner/search.h"
#include "simulator/loop_costs.h"
#include "simulator/pipeline_sim.h"
#include "schedules/schedule_generators.h"
#include "specs/presets.h"

namespace {

kp::PlanRequest KimiOnH200(int nodes) {
  kp::RealFileSystem fs;
  kp::PresetCatalog catalog(fs, kp::DefaultPresetDir());
  auto model = catalog.Model("kimi-k2.6");
  auto gpu = catalog.Gpu("h200");
  if (!model.ok() || !gpu.ok()) {
    std::cerr << "presets not found under " << kp::DefaultPresetDir() << "\n";
    std::exit(1);
  }
  kp::PlanRequest req;
  req.model = *model;
  req.gpu = *gpu;
  req.nodes = nodes;
  req.gpus_per_node = 8;
  req.global_batch = 1024;
  req.plan.rollout_tp = 8;
  req.plan.rollout_ep = 8;
  return req;
}

/// Best wall time of `repeats` runs of `body`.
double Best(int repeats, const std::function<void()>& body) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    kp::Stopwatch w;
    body();
    best = std::min(best, w.Seconds());
  }
  return best;
}

int Search(int nodes) {
  kp::PlanRequest req = KimiOnH200(nodes);
  req.search = true;
  const kp::ParamCount pc = kp::CountParams(req.model);
  kp::SearchResult r;
  const double s = Best(5, [&] { r = kp::SearchPlans(req, pc); });
  std::printf("search kimi-k2.6 on %d H200: %lld valid plans evaluated, %lld feasible; best of 5: %.4f s, %.0f plans/s\n",
              nodes * 8, r.evaluated, r.feasible, s, r.evaluated / s);
  return 0;
}

int Loop(int nodes) {
  kp::PlanRequest req = KimiOnH200(nodes);
  req.search = true;
  req.top = 1;
  const kp::ParamCount pc = kp::CountParams(req.model);
  kp::SearchResult found = kp::SearchPlans(req, pc);
  if (found.best.empty()) {
    std::cerr << "no feasible plan on " << nodes * 8 << " GPUs\n";
    return 1;
  }
  const kp::PlanEvaluation& plan = found.best.front();
  req.plan = plan.plan;
  std::uint64_t events = 0;
  double step = 0;
  const double s = Best(5, [&] {
    kp::LoopCostOptions o;
    auto sync = kp::PlanSyncTime(req, plan.plan, kp::Network::kRdma);
    o.sync = sync.ok() ? *sync : kp::Seconds(0);
    auto costs = kp::EstimateLoopCosts(req, plan, pc, o);
    kp::LoopOptions lo;
    lo.actor_gpus = req.actor_gpus();
    lo.steps = 2;
    auto r = kp::SimulateLoop(costs.ok() ? costs->costs : kp::LoopCosts{}, lo);
    events = r.ok() ? r->events : 0;
    step = r.ok() ? r->step_time.value() : 0;
  });
  std::printf("one SDPO step of kimi-k2.6 on %d H200 (plan tp %d pp %d ep %d): priced and simulated in %.4f s "
              "(best of 5), predicted step %.1f s, %llu loop events\n",
              nodes * 8, plan.plan.tp, plan.plan.pp, plan.plan.ep, s, step, static_cast<unsigned long long>(events));
  return 0;
}

int Pipeline(int pp, int vp, int microbatches) {
  auto schedule = kp::GenerateSchedule(kp::ScheduleKind::kInterleaved1F1B, pp, vp, microbatches);
  if (!schedule.ok()) {
    std::cerr << schedule.status().message() << "\n";
    return 2;
  }
  // Per rank 10 ms forward, 12 + 8 ms backward, 0.3 ms per hop: the hops
  // stall some RECVs, which then cost an event each.
  const kp::StageCosts costs{kp::Nanoseconds(10'000'000), kp::Nanoseconds(12'000'000), kp::Nanoseconds(8'000'000),
                             kp::Nanoseconds(300'000)};
  kp::Result<kp::PipelineSimResult> r = kp::Status::Internal("not run");
  const double s = Best(5, [&] { r = kp::SimulatePipeline(*schedule, costs); });
  if (!r.ok()) {
    std::cerr << r.status().message() << "\n";
    return 1;
  }
  std::printf("pipeline interleaved-1f1b pp %d x vp %d x %d micro-batches: %llu events, best of 5: %.4f s, "
              "%.2f M events/s (bubble %.4f)\n",
              pp, vp, microbatches, static_cast<unsigned long long>(r->events), s, r->events / s / 1e6,
              r->bubble_fraction);
  return 0;
}

// The positional argument at `i` (its name for messages) as an integer of
// at least `min`, or `fallback` when it is not given.
kp::Result<int> Positional(int argc, char** argv, int i, const char* name, int min, int fallback) {
  if (argc <= i) return fallback;
  KP_ASSIGN_OR_RETURN(const std::int64_t v, kp::ParseIntInRange(name, argv[i], min, 1 << 20));
  return static_cast<int>(v);
}

int Run(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "search";
  if (what == "pipeline") {
    const kp::Result<int> pp = Positional(argc, argv, 2, "PP", 2, 16), vp = Positional(argc, argv, 3, "VP", 1, 4),
                          mb = Positional(argc, argv, 4, "MICROBATCHES", 1, 512);
    for (const kp::Result<int>* r : {&pp, &vp, &mb})
      if (!r->ok()) {
        std::cerr << r->status().message() << "\n";
        return 2;
      }
    return Pipeline(*pp, *vp, *mb);
  }
  const kp::Result<int> nodes = Positional(argc, argv, 2, "NODES", 1, 128);
  if (!nodes.ok()) {
    std::cerr << nodes.status().message() << "\n";
    return 2;
  }
  if (what == "search") return Search(*nodes);
  if (what == "loop") return Loop(*nodes);
  std::cerr << "usage: kimi-plan-bench search|loop [NODES] | kimi-plan-bench pipeline [PP VP MICROBATCHES]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }
