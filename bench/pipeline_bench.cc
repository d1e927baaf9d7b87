// kimi-plan-pipeline-bench: times the pipeline executor (runtime/
// pipeline_runtime.h) over c10d, one process per pipeline rank started with
// the torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT; WORLD_SIZE = pp), and measures the costs that
// `kimi-plan simulate pipeline` takes, so that the measured step can be put
// beside the simulator's prediction:
//   - whole steps: the median of --steps after --warmup, each from a barrier
//     to the step's end, device-synchronised;
//   - F and B of every stage: one micro-batch through the stage alone
//     (forward with autograd on; backward of the stage's outputs, input and
//     weight gradients in one pass as the executor does), median of 3;
//   - one hop: the payload [1 + entries, b / M, T, D] of the transport in use
//     (entries: the hops' mean), half a ping-pong between ranks 0 and 1.
// The simulator's F / B are per rank (all the stages it holds; it divides by
// vp per action); the runtime has no separate W (it runs at I), so W = 0.
//
//   RANK=r WORLD_SIZE=2 ... kimi-plan-pipeline-bench --shape bench/kimi-1b.json
//       --pp 2 --vp 2 --schedule interleaved-1f1b --microbatches 8
//       --attnres-cache on --batch 8 --seq-len 1024 --warmup 2 --steps 5
//       [--device cuda] [--backend nccl] [--dtype bf16] [--timeout-s 300] [--json]
//
// Output (rank 0): a table, the simulate command line, a RESULT line; with
// --json one JSON object instead. Exit codes: 0, 2 on bad arguments, 1 when
// a step or a collective fails.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "bench/bench_util.h"
#include "common/file_system.h"
#include "common/status.h"
#include "common/table.h"
#include "runtime/comm/c10d_communicator.h"
#include "runtime/train/pipeline_runtime.h"
#include "runtime/train/pipeline_stage.h"
#include "runtime/comm/rendezvous.h"
#include "runtime/model/runtime_config.h"
#include "runtime/comm/device.h"
#include "schedules/attnres_transport.h"
#include "schedules/schedule_generators.h"
#include "specs/presets.h"

namespace {

using kp::bench::Median;
using kp::bench::Synchronize;

using kp::Result;
using kp::Status;
using nlohmann::json;

struct Args {
  std::string shape, device = "cuda", backend = "auto", dtype = "bf16", schedule = "interleaved-1f1b";
  int pp = 2, vp = 2, microbatches = 8, batch = 8, seq_len = 1024, warmup = 2, steps = 5, timeout_s = 300;
  bool cache = true, json = false;
};

Result<Args> ParseArgs(int argc, char** argv) {
  Args a;
  KP_ASSIGN_OR_RETURN(const auto kv, kp::bench::OptionPairs(argc, argv, "json", &a.json));
  // Each integer option and its least value.
  const kp::bench::IntOptions ints = {
      {"pp", {&a.pp, 2}},           {"vp", {&a.vp, 1}},         {"microbatches", {&a.microbatches, 1}},
      {"batch", {&a.batch, 1}},     {"seq-len", {&a.seq_len, 1}}, {"warmup", {&a.warmup, 0}},
      {"steps", {&a.steps, 1}},     {"timeout-s", {&a.timeout_s, 1}}};
  const kp::bench::StringOptions strings = {{"shape", &a.shape},     {"device", &a.device},
                                            {"backend", &a.backend}, {"dtype", &a.dtype},
                                            {"schedule", &a.schedule}};
  KP_RETURN_IF_ERROR(kp::bench::ApplyOptions(kv, ints, strings, [&](const std::string& k, const std::string& v) -> Result<bool> {
    if (k != "attnres-cache") return false;
    KP_ASSIGN_OR_RETURN(a.cache, kp::bench::OnOffOption(k, v));
    return true;
  }));
  if (a.shape.empty()) return Status::InvalidArgument("--shape FILE is required");
  return a;
}

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

/// Everything a rank needs for the isolated measurements.
struct Bench {
  Args args;
  kp::runtime::PipelineRankConfig config;
  torch::Device device{torch::kCPU};
  torch::ScalarType act = torch::kFloat;
  kp::AttnResTransport transport;  // empty routing without attention residuals
  std::int64_t Rows() const { return args.batch / args.microbatches; }
  int StackBefore(int s) const {
    return transport.stages.empty() ? 0 : static_cast<int>(transport.stages[s].naive_fwd.size());
  }
};

// One micro-batch through stage s alone: F (forward with autograd) and B
// (backward of its outputs), each the median of 3 after one warm-up, in us.
std::pair<double, double> StageCosts(const Bench& b, kp::runtime::PipelineStageModule& module, int s, bool last) {
  const auto opts = torch::TensorOptions().dtype(b.act).device(b.device);
  const auto ids = torch::TensorOptions().dtype(torch::kLong).device(b.device);
  const std::int64_t d = b.config.train.model.hidden, t = b.args.seq_len;
  std::vector<double> f, bw;
  for (int rep = 0; rep < 4; ++rep) {
    kp::runtime::ResidualStream in;
    torch::Tensor tokens = torch::randint(b.config.train.model.vocab, {b.Rows(), t}, ids);
    if (s > 0) {
      in.hidden = torch::randn({b.Rows(), t, d}, opts).requires_grad_(true);
      for (int e = 0; e < b.StackBefore(s); ++e) in.blocks.push_back(torch::randn({b.Rows(), t, d}, opts).requires_grad_(true));
    }
    Synchronize(b.device);
    double t0 = Now();
    kp::runtime::ResidualStream out = module.RunLayers(s == 0 ? module.Embed(tokens) : std::move(in), false);
    std::vector<torch::Tensor> roots, grads;
    if (last) {
      roots.push_back(module.Loss(out, tokens));
      grads.push_back(torch::ones_like(roots.back()));
    } else {
      roots.push_back(out.hidden);
      for (const torch::Tensor& e : out.blocks)
        if (e.requires_grad()) roots.push_back(e);
      for (const torch::Tensor& r : roots) grads.push_back(torch::randn_like(r));
    }
    Synchronize(b.device);
    const double t1 = Now();
    torch::autograd::backward(roots, grads);
    Synchronize(b.device);
    const double t2 = Now();
    if (rep > 0) f.push_back((t1 - t0) * 1e6), bw.push_back((t2 - t1) * 1e6);
  }
  for (const torch::Tensor& p : module.TrainableParameters())
    if (p.grad().defined()) const_cast<torch::Tensor&>(p).mutable_grad() = torch::Tensor();
  return {Median(f), Median(bw)};
}

// The mean number of stack entries on a forward hop for the transport in use.
double MeanHopEntries(const Bench& b) {
  const auto& st = b.transport.stages;
  if (st.size() < 2) return 0;
  double sum = 0;
  for (std::size_t s = 1; s < st.size(); ++s) sum += double((b.config.attnres_cache ? st[s].cached_fwd : st[s].naive_fwd).size());
  return sum / double(st.size() - 1);
}

// Half the median of 5 ping-pongs of one hop's payload between ranks 0 and 1.
Result<double> HopMicroseconds(const Bench& b, kp::runtime::Communicator& world, std::int64_t entries) {
  if (world.rank() > 1) return 0.0;
  const auto opts = torch::TensorOptions().dtype(b.act).device(b.device);
  torch::Tensor buffer = torch::zeros({1 + entries, b.Rows(), b.args.seq_len, b.config.train.model.hidden}, opts);
  std::vector<double> trips;
  for (int rep = 0; rep < 6; ++rep) {
    Synchronize(b.device);
    const double t0 = Now();
    const int tag = 1 << 20 | rep;
    if (world.rank() == 0) {
      KP_RETURN_IF_ERROR(world.Send(buffer, 1, tag));
      KP_RETURN_IF_ERROR(world.Recv(buffer, 1, tag));
    } else {
      KP_RETURN_IF_ERROR(world.Recv(buffer, 0, tag));
      KP_RETURN_IF_ERROR(world.Send(buffer, 0, tag));
    }
    Synchronize(b.device);
    if (rep > 0) trips.push_back((Now() - t0) * 1e6);
  }
  return Median(trips) / 2;
}

std::string Fixed(double v, int digits) { return kp::FormatFixed(v, digits); }

struct Measured {
  std::vector<double> step_ms, stage_f_us, stage_b_us;
  double p2p_us = 0, hop_entries = 0;
  std::vector<int> stage_to_rank;
  double RankSum(const std::vector<double>& v, int rank) const {
    double s = 0;
    for (std::size_t i = 0; i < v.size(); ++i)
      if (stage_to_rank[i] == rank) s += v[i];
    return s;
  }
  double Critical(const std::vector<double>& v, int pp) const {
    double m = 0;
    for (int r = 0; r < pp; ++r) m = std::max(m, RankSum(v, r));
    return m;
  }
};

std::string SimulateCommand(const Args& a, const Measured& m) {
  std::ostringstream o;
  o << "kimi-plan simulate pipeline --schedule " << a.schedule << " --pp " << a.pp << " --vp " << a.vp
    << " --microbatches " << a.microbatches << " --f-us " << Fixed(m.Critical(m.stage_f_us, a.pp), 1) << " --b-us "
    << Fixed(m.Critical(m.stage_b_us, a.pp), 1) << " --w-us 0 --p2p-us " << Fixed(m.p2p_us, 1);
  return o.str();
}

void Report(const Args& a, const Measured& m, std::int64_t hop_bytes) {
  const std::string command = SimulateCommand(a, m);
  const double median = Median(m.step_ms);
  if (a.json) {
    json out = {{"schema", "kimi-plan.pipeline-bench/1"}, {"shape", a.shape}, {"device", a.device},
                {"dtype", a.dtype}, {"schedule", a.schedule}, {"pp", a.pp}, {"vp", a.vp},
                {"microbatches", a.microbatches}, {"attnres_cache", a.cache}, {"batch", a.batch},
                {"seq_len", a.seq_len}, {"steps_ms", m.step_ms}, {"median_step_ms", median},
                {"stage_forward_us", m.stage_f_us}, {"stage_backward_us", m.stage_b_us},
                {"hop_entries", m.hop_entries}, {"hop_bytes", hop_bytes}, {"p2p_us", m.p2p_us},
                {"simulate", {{"f_us", m.Critical(m.stage_f_us, a.pp)}, {"b_us", m.Critical(m.stage_b_us, a.pp)},
                              {"w_us", 0}, {"p2p_us", m.p2p_us}}},
                {"simulate_command", command}};
    std::cout << out.dump(2) << "\n";
    return;
  }
  kp::Table stages({"stage", "rank", "F us", "B us"});
  for (std::size_t s = 0; s < m.stage_f_us.size(); ++s)
    stages.AddRow({std::to_string(s), std::to_string(m.stage_to_rank[s]), Fixed(m.stage_f_us[s], 1),
                   Fixed(m.stage_b_us[s], 1)});
  std::cout << stages.Render();
  std::cout << "one hop: " << Fixed(m.hop_entries, 2) << " entries + hidden, " << hop_bytes << " bytes, "
            << Fixed(m.p2p_us, 1) << " us\n";
  std::cout << "measured step: median " << Fixed(median, 2) << " ms over " << m.step_ms.size() << " steps (min "
            << Fixed(*std::min_element(m.step_ms.begin(), m.step_ms.end()), 2) << ", max "
            << Fixed(*std::max_element(m.step_ms.begin(), m.step_ms.end()), 2) << ")\n";
  std::cout << "the simulator's costs (per rank, the critical rank): F " << Fixed(m.Critical(m.stage_f_us, a.pp), 1)
            << " us, B " << Fixed(m.Critical(m.stage_b_us, a.pp), 1) << " us, W 0, p2p " << Fixed(m.p2p_us, 1)
            << " us\n"
            << "predict with:\n  " << command << "\n";
  std::cout << "RESULT median_step_ms=" << Fixed(median, 3) << " f_us=" << Fixed(m.Critical(m.stage_f_us, a.pp), 1)
            << " b_us=" << Fixed(m.Critical(m.stage_b_us, a.pp), 1) << " p2p_us=" << Fixed(m.p2p_us, 1)
            << " cache=" << (a.cache ? "on" : "off") << "\n";
}

Result<Bench> Configure(const Args& a, const kp::runtime::Rendezvous& rv) {
  Bench b;
  b.args = a;
  kp::RealFileSystem fs;
  KP_ASSIGN_OR_RETURN(b.config.train.model, kp::PresetCatalog(fs, kp::DefaultPresetDir()).ModelFile(a.shape));
  KP_RETURN_IF_ERROR(kp::runtime::ValidateForRuntime(b.config.train.model));
  KP_ASSIGN_OR_RETURN(b.config.train.options.dtype, kp::runtime::ParseDType(a.dtype));
  KP_ASSIGN_OR_RETURN(b.config.schedule, kp::ParseSchedule(a.schedule));
  b.act = b.config.train.options.dtype == kp::runtime::DType::kBf16 ? torch::kBFloat16 : torch::kFloat;
  b.config.train.batch = a.batch;
  b.config.train.seq_len = a.seq_len;
  b.config.train.steps = a.warmup + a.steps;
  b.config.train.lr = 3e-4;
  b.config.train.warmup = 2;
  b.config.train.deterministic = false;
  b.config.train.device = a.device == "cuda" ? "cuda:" + std::to_string(rv.local_rank) : a.device;
  KP_ASSIGN_OR_RETURN(b.device, kp::runtime::ParseDevice(b.config.train.device));
  b.config.pp = a.pp;
  b.config.vp = a.vp;
  b.config.microbatches = a.microbatches;
  b.config.attnres_cache = a.cache;
  if (rv.world_size != a.pp)
    return Status::InvalidArgument("WORLD_SIZE " + std::to_string(rv.world_size) + " must equal --pp " +
                                   std::to_string(a.pp));
  const int stages = a.pp * (kp::ScheduleTakesVp(b.config.schedule) ? a.vp : 1);
  KP_ASSIGN_OR_RETURN(kp::StageSplit split, kp::EvenSplit(b.config.train.model.layers, stages));
  if (b.config.train.model.attn_res_block > 0) {
    KP_ASSIGN_OR_RETURN(b.transport, kp::ComputeAttnResTransport(b.config.train.model.layers,
                                                                 b.config.train.model.attn_res_block, split, a.pp));
  }
  return b;
}

Status Run(const Args& a) {
  KP_ASSIGN_OR_RETURN(kp::runtime::Rendezvous rv,
                      kp::runtime::RendezvousFromEnvironment([](const char* n) { return std::getenv(n); }));
  KP_ASSIGN_OR_RETURN(Bench b, Configure(a, rv));
  torch::manual_seed(0);
  kp::runtime::C10dOptions c10d;
  c10d.backend = a.backend;
  c10d.device = b.config.train.device;
  c10d.timeout_s = a.timeout_s;
  KP_ASSIGN_OR_RETURN(std::unique_ptr<kp::runtime::Communicator> world, kp::runtime::ConnectC10d(rv, c10d));
  KP_ASSIGN_OR_RETURN(std::unique_ptr<kp::runtime::PipelineRank> rank, kp::runtime::PipelineRank::Create(b.config, *world));
  Measured m;
  std::vector<std::int64_t> tokens(std::size_t(a.batch) * (a.seq_len + 1));
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = std::int64_t(i * 2654435761u % b.config.train.model.vocab);
  for (int i = 0; i < a.warmup + a.steps; ++i) {
    KP_RETURN_IF_ERROR(world->Barrier());
    Synchronize(b.device);
    const double t0 = Now();
    KP_ASSIGN_OR_RETURN(kp::runtime::PipelineStepResult r, rank->TrainStep(tokens));
    Synchronize(b.device);
    const double ms = (Now() - t0) * 1e3;
    if (world->rank() == 0 && !a.json)
      std::printf("step %2d%s  loss %.4f  %.2f ms\n", i + 1, i < a.warmup ? " (warm-up)" : "", r.loss, ms);
    if (i >= a.warmup) m.step_ms.push_back(ms);
  }
  // Every stage's F and B, filled by its rank and summed over the world.
  torch::Tensor table = torch::zeros({2, a.pp * a.vp}, torch::kDouble);
  for (int s : rank->stages()) {
    const auto [f, bw] = StageCosts(b, rank->stage_module(s), s, s == a.pp * a.vp - 1);
    table[0][s] = f, table[1][s] = bw;
  }
  torch::Tensor on_device = table.to(b.device);
  KP_RETURN_IF_ERROR(world->AllReduceSum(on_device));
  table = on_device.cpu();
  m.hop_entries = MeanHopEntries(b);
  const std::int64_t entries = static_cast<std::int64_t>(m.hop_entries + 0.5);
  KP_ASSIGN_OR_RETURN(m.p2p_us, HopMicroseconds(b, *world, entries));
  KP_ASSIGN_OR_RETURN(kp::PipelineSchedule schedule,
                      kp::GenerateSchedule(b.config.schedule, a.pp, kp::ScheduleTakesVp(b.config.schedule) ? a.vp : 1,
                                           a.microbatches));
  m.stage_to_rank = schedule.stage_to_rank;
  for (int s = 0; s < schedule.num_stages; ++s)
    m.stage_f_us.push_back(table[0][s].item<double>()), m.stage_b_us.push_back(table[1][s].item<double>());
  const std::int64_t hop_bytes = (1 + entries) * b.Rows() * a.seq_len * b.config.train.model.hidden *
                                 static_cast<std::int64_t>(torch::elementSize(b.act));
  if (world->rank() == 0) Report(a, m, hop_bytes);
  return world->Barrier();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string prefix = "kimi-plan-pipeline-bench: ";
  return kp::bench::BenchMain<Args>(ParseArgs(argc, argv), prefix, [&](const Args& a) { return kp::bench::RunExitCode(Run(a), prefix); });
}
