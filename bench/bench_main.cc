// Benchmarks (never timed tests): `kimi-plan-bench search` times the plan
// search for kimi-k2.6 on 1024 H200; results go to docs/benchmarks.md.
#include <cstdio>
#include <iostream>
#include <string>

#include "common/clock.h"
#include "common/file_system.h"
#include "planner/search.h"
#include "specs/presets.h"

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "search";
  const int nodes = argc > 2 ? std::atoi(argv[2]) : 128;
  if (what != "search") {
    std::cerr << "usage: kimi-plan-bench search [NODES]\n";
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
