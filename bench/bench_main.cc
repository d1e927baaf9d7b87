// Benchmarks (never timed tests): `kimi-plan-bench search` times the plan
// search for kimi-k2.6 on 1024 H200; `kimi-plan-bench pipeline` times the
// discrete-event run of an interleaved 1F1B step at pp 16 x vp 4 x 512
// micro-batches. Results go to docs/benchmarks.md.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>

#include "common/clock.h"
#include "common/file_system.h"
#include "planner/search.h"
#include "simulator/pipeline_sim.h"
#include "simulator/schedule_generators.h"
#include "specs/presets.h"

namespace {

int BenchPipeline(int pp, int vp, int microbatches) {
  auto schedule = kp::GenerateSchedule(kp::ScheduleKind::kInterleaved1F1B, pp, vp, microbatches);
  if (!schedule.ok()) {
    std::cerr << schedule.status().message() << "\n";
    return 2;
  }
  // Per rank 10 ms forward, 12 + 8 ms backward, 0.3 ms per hop: the hops
  // stall some RECVs, which then cost an event each.
  const kp::StageCosts costs{kp::Nanoseconds(10'000'000), kp::Nanoseconds(12'000'000), kp::Nanoseconds(8'000'000),
                             kp::Nanoseconds(300'000)};
  const int repeats = 5;
  double best = 1e30;
  kp::Result<kp::PipelineSimResult> r = kp::Status::Internal("not run");
  for (int i = 0; i < repeats; ++i) {
    kp::Stopwatch w;
    r = kp::SimulatePipeline(*schedule, costs);
    best = std::min(best, w.Seconds());
  }
  if (!r.ok()) {
    std::cerr << r.status().message() << "\n";
    return 1;
  }
  std::printf("pipeline interleaved-1f1b pp %d x vp %d x %d micro-batches: %llu events, best of %d: %.4f s, "
              "%.2f M events/s (bubble %.4f)\n",
              pp, vp, microbatches, static_cast<unsigned long long>(r->events), repeats, best, r->events / best / 1e6,
              r->bubble_fraction);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "search";
  if (what == "pipeline")
    return BenchPipeline(argc > 2 ? std::atoi(argv[2]) : 16, argc > 3 ? std::atoi(argv[3]) : 4,
                         argc > 4 ? std::atoi(argv[4]) : 512);
  const int nodes = argc > 2 ? std::atoi(argv[2]) : 128;
  if (what != "search") {
    std::cerr << "usage: kimi-plan-bench search [NODES] | kimi-plan-bench pipeline [PP VP MICROBATCHES]\n";
    return 2;
  }
  kp::RealFileSystem fs;
  kp::PresetCatalog catalog(fs, kp::DefaultPresetDir());
  auto model = catalog.Model("kimi-k2.6");
  auto gpu = catalog.Gpu("h200");
  if (!model.ok() || !gpu.ok()) {
    std::cerr << "presets not found under " << kp::DefaultPresetDir() << "\n";
    return 1;
  }
  kp::PlanRequest req;
  req.model = *model;
  req.gpu = *gpu;
  req.nodes = nodes;
  req.gpus_per_node = 8;
  req.global_batch = 1024;
  req.search = true;
  req.plan.rollout_tp = 8;
  req.plan.rollout_ep = 8;
  const kp::ParamCount pc = kp::CountParams(req.model);
  const int repeats = 5;
  double best = 1e30;
  kp::SearchResult r;
  for (int i = 0; i < repeats; ++i) {
    kp::Stopwatch w;
    r = kp::SearchPlans(req, pc);
    best = std::min(best, w.Seconds());
  }
  std::printf("search kimi-k2.6 on %d H200: %lld valid plans evaluated, %lld feasible; best of %d: %.4f s, %.0f plans/s\n",
              nodes * 8, r.evaluated, r.feasible, repeats, best, r.evaluated / best);
  return 0;
}
