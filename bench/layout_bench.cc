// kimi-plan-layout-bench: `kimi-plan run`'s training session (runtime/train/
// train_session.h) on any layout, without the CLI and the store, for the GPU
// machine's runtime-only tree: one process per rank started with the
// torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT; WORLD_SIZE = pp x dp x cp x tp), each on cuda:LOCAL_RANK.
// It reports what issue 35 compares with the plan: every step's loss (the
// curve against one GPU's), the median step time after --warmup, tokens/s,
// and every rank's peak memory.
//
//   RANK=r WORLD_SIZE=2 ... kimi-plan-layout-bench --shape bench/kimi-node.json
//       --tp 2 [--sequence-parallel on] [--cp 1] [--ep 1] [--etp 1] [--pp 1] [--vp 1]
//       [--schedule 1f1b] [--attnres-cache off] [--batch 8] [--micro-batch 0]
//       [--seq-len 1024] [--steps 20] [--warmup 2] [--dtype bf16] [--device cuda]
//       [--backend auto] [--timeout-s 300] [--json]
//
// Output (rank 0): a line per step, a summary and a RESULT line; with --json
// one JSON object. Exit codes: 0, 2 on bad arguments or a layout the runtime
// refuses, 1 when a step or a collective fails.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "bench/bench_util.h"
#include "common/file_system.h"
#include "common/status.h"
#include "runtime/comm/rendezvous.h"
#include "runtime/model/runtime_config.h"
#include "runtime/train/train_session.h"
#include "schedules/schedule_generators.h"
#include "specs/presets.h"

namespace {

using kp::Result;
using kp::Status;
using kp::bench::Median;

struct Args {
  std::string shape, device = "cuda", backend = "auto", dtype = "bf16", schedule = "1f1b";
  int tp = 1, cp = 1, ep = 1, etp = 1, pp = 1, vp = 1, batch = 8, micro_batch = 0, seq_len = 1024, steps = 20,
      warmup = 2, timeout_s = 300;
  bool sequence_parallel = true, cache = false, json = false;
};

Result<Args> ParseArgs(int argc, char** argv) {
  Args a;
  KP_ASSIGN_OR_RETURN(const auto kv, kp::bench::OptionPairs(argc, argv, "json", &a.json));
  // Each integer option and its least value.
  const kp::bench::IntOptions ints = {
      {"tp", {&a.tp, 1}},       {"cp", {&a.cp, 1}},          {"ep", {&a.ep, 1}},
      {"etp", {&a.etp, 1}},     {"pp", {&a.pp, 1}},          {"vp", {&a.vp, 1}},
      {"batch", {&a.batch, 1}}, {"micro-batch", {&a.micro_batch, 0}}, {"seq-len", {&a.seq_len, 1}},
      {"steps", {&a.steps, 1}}, {"warmup", {&a.warmup, 0}},  {"timeout-s", {&a.timeout_s, 1}}};
  const kp::bench::StringOptions strings = {{"shape", &a.shape},     {"device", &a.device},
                                            {"backend", &a.backend}, {"dtype", &a.dtype},
                                            {"schedule", &a.schedule}};
  KP_RETURN_IF_ERROR(kp::bench::ApplyOptions(kv, ints, strings, [&](const std::string& k, const std::string& v) -> Result<bool> {
    if (k == "attnres-cache") {
      KP_ASSIGN_OR_RETURN(a.cache, kp::bench::OnOffOption(k, v));
    } else if (k == "sequence-parallel") {
      KP_ASSIGN_OR_RETURN(a.sequence_parallel, kp::bench::OnOffOption(k, v));
    } else {
      return false;
    }
    return true;
  }));
  if (a.shape.empty()) return Status::InvalidArgument("--shape FILE is required");
  return a;
}

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

Result<kp::runtime::TrainConfig> TrainConfigOf(const Args& a, const kp::runtime::Rendezvous& rv) {
  kp::RealFileSystem fs;
  kp::runtime::TrainConfig c;
  KP_ASSIGN_OR_RETURN(c.model, kp::PresetCatalog(fs, kp::DefaultPresetDir()).ModelFile(a.shape));
  KP_RETURN_IF_ERROR(kp::runtime::ValidateForRuntime(c.model));
  KP_ASSIGN_OR_RETURN(c.options.dtype, kp::runtime::ParseDType(a.dtype));
  c.batch = a.batch;
  c.seq_len = a.seq_len;
  c.steps = a.warmup + a.steps;
  c.lr = 3e-4;
  c.warmup = 2;
  c.deterministic = false;
  c.device = a.device == "cuda" ? "cuda:" + std::to_string(rv.local_rank) : a.device;
  return c;
}

kp::runtime::ParallelLayout LayoutOf(const Args& a, int world) {
  kp::runtime::ParallelLayout l;
  l.tp = a.tp, l.cp = a.cp, l.ep = a.ep, l.etp = a.etp, l.pp = a.pp, l.vp = a.vp;
  l.dp = world / (a.pp * a.cp * a.tp);
  l.sequence_parallel = a.sequence_parallel;
  l.schedule = a.schedule;
  l.attnres_cache = a.cache;
  l.micro_batch = a.micro_batch;
  return l;
}

Status Run(const Args& a) {
  KP_ASSIGN_OR_RETURN(kp::runtime::Rendezvous rv,
                      kp::runtime::RendezvousFromEnvironment([](const char* n) { return std::getenv(n); }));
  KP_ASSIGN_OR_RETURN(kp::runtime::TrainConfig config, TrainConfigOf(a, rv));
  const kp::runtime::ParallelLayout layout = LayoutOf(a, rv.world_size);
  if (layout.world() != rv.world_size)
    return Status::InvalidArgument("WORLD_SIZE " + std::to_string(rv.world_size) + " is not a multiple of pp x cp x tp");
  kp::runtime::C10dOptions c10d;
  c10d.backend = a.backend;
  c10d.device = config.device;
  c10d.timeout_s = a.timeout_s;
  kp::RealFileSystem fs;
  KP_ASSIGN_OR_RETURN(std::unique_ptr<kp::runtime::TrainSession> session,
                      kp::runtime::TrainSession::Create(config, layout, rv, c10d, fs));
  const torch::Device device = torch::Device(config.device);
  std::vector<double> losses, step_ms;
  std::vector<double> peaks;
  for (int i = 0; i < a.warmup + a.steps; ++i) {
    kp::bench::Synchronize(device);
    const double t0 = Now();
    KP_ASSIGN_OR_RETURN(kp::runtime::SessionStepMetrics m, session->Step());
    kp::bench::Synchronize(device);
    const double ms = (Now() - t0) * 1e3;
    losses.push_back(m.step.loss);
    if (i >= a.warmup) step_ms.push_back(ms);
    peaks = m.rank_peak_memory_bytes;
    if (rv.rank == 0 && !a.json)
      std::printf("step %2d%s  loss %.6f  %.2f ms\n", i + 1, i < a.warmup ? " (warm-up)" : "", m.step.loss, ms);
  }
  if (rv.rank != 0) return Status::Ok();
  const double median = Median(step_ms);
  const double tokens_per_s = double(a.batch) * a.seq_len / (median / 1e3);
  if (a.json) {
    const nlohmann::json out = {
        {"schema", "kimi-plan.layout-bench/1"}, {"shape", a.shape}, {"device", a.device}, {"dtype", a.dtype},
        {"world", rv.world_size}, {"tp", a.tp}, {"cp", a.cp}, {"ep", a.ep}, {"etp", a.etp}, {"pp", a.pp},
        {"vp", a.vp}, {"dp", layout.dp}, {"sequence_parallel", a.sequence_parallel}, {"schedule", a.schedule},
        {"attnres_cache", a.cache}, {"batch", a.batch}, {"micro_batch", a.micro_batch}, {"seq_len", a.seq_len},
        {"losses", losses},
        {"steps_ms", step_ms}, {"median_step_ms", median}, {"tokens_per_s", tokens_per_s},
        {"rank_peak_memory_bytes", peaks}};
    std::cout << out.dump(2) << "\n";
    return Status::Ok();
  }
  std::printf("median step %.2f ms over %zu steps, %.0f tokens/s\n", median, step_ms.size(), tokens_per_s);
  for (std::size_t r = 0; r < peaks.size(); ++r) std::printf("rank %zu peak %.3f GB\n", r, peaks[r] / 1e9);
  std::printf("RESULT median_step_ms=%.3f tokens_per_s=%.0f last_loss=%.6f max_peak_gb=%.3f\n", median, tokens_per_s,
              losses.back(), peaks.empty() ? 0.0 : *std::max_element(peaks.begin(), peaks.end()) / 1e9);
  return Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string prefix = "kimi-plan-layout-bench: ";
  return kp::bench::BenchMain<Args>(ParseArgs(argc, argv), prefix, [&](const Args& a) { return kp::bench::RunExitCode(Run(a), prefix); });
}
