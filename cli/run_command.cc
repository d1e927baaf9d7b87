// `kimi-plan run`: the distributed runtime. Without RANK in the environment
// and with --nproc N it is the local launcher: it starts N ranks of this
// executable and watches them. With RANK set (srun, Modal, or the launcher)
// it is one rank: it meets the others over c10d and trains, rank 0 logging
// to the store. Sees the runtime only through runtime/dist_trainer.h, which
// includes no LibTorch. docs/runtime.md ("Distributed runs") describes it.

#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/log.h"
#include "cli/local_ranks.h"
#include "cli/options.h"
#include "common/limits.h"
#include "cli/run_status.h"
#include "cli/run_options.h"
#include "cli/runtime_options.h"
#include "planner/plan_json.h"
#include "planner/schedule_model.h"
#include "runtime/comm/device_check.h"
#include "runtime/train/dist_trainer.h"
#include "runtime/model/runtime_config.h"
#include "specs/param_count.h"
#include "specs/presets.h"
#include "store/store.h"

namespace kp {

namespace {

using nlohmann::json;
using runtime::ParallelLayout;
using runtime::TrainConfig;

json LayoutJson(const ParallelLayout& l) {
  return {{"pp", l.pp}, {"vp", l.vp}, {"dp", l.dp}, {"ep", l.ep}, {"etp", l.etp}, {"cp", l.cp}, {"tp", l.tp},
          {"sequence_parallel", l.tp > 1 && l.sequence_parallel}, {"schedule", l.schedule},
          {"attnres_cache", l.attnres_cache}, {"stage_layers", LayerCounts(l.split)},
          {"micro_batch", l.micro_batch}};
}

// ---------------------------------------------------------------- one rank

std::string ProgressLine(const runtime::StepMetrics& m, int steps) {
  std::ostringstream o;
  o << "step " << std::setw(5) << m.step << "/" << steps << "  loss " << std::fixed << std::setprecision(4) << m.loss
    << "  grad-norm " << std::setprecision(3) << m.grad_norm << "  lr " << std::scientific << std::setprecision(2)
    << m.lr << std::fixed << std::setprecision(0) << "  " << m.tokens_per_s << " tok/s";
  return o.str();
}

Status LogStep(Store& store, std::int64_t run_id, const runtime::DistStepMetrics& d) {
  const runtime::StepMetrics& m = d.step;
  StepRecord rec{run_id, m.step, m.loss, m.grad_norm, m.lr, m.tokens_per_s, m.step_seconds, m.peak_memory_bytes, ""};
  KP_RETURN_IF_ERROR(store.AppendStep(rec));
  std::vector<TrafficRecord> rows;
  for (const runtime::TrafficRow& t : d.traffic)
    rows.push_back({run_id, m.step, t.stage, t.direction, t.entries, t.bytes});
  return store.AppendTraffic(rows);
}

std::string MegabyteList(const std::vector<double>& bytes) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(1);
  for (size_t r = 0; r < bytes.size(); ++r) o << (r ? ", " : "") << bytes[r] / 1e6 << " MB";
  return o.str();
}

// The rank's steps after the run's row exists (rank 0) and its summary.
Status RankSteps(const po::variables_map& vm, const TrainConfig& config, const ParallelLayout& layout,
                 const runtime::Rendezvous& rv, runtime::DistTrainSession& session, Store* store,
                 const RunRecord& run, CliEnv& env) {
  const int log_every = vm["log-every"].as<int>();
  std::vector<double> losses, rank_peaks, build_peaks;
  while (session.step() < config.steps) {
    KP_ASSIGN_OR_RETURN(runtime::DistStepMetrics d, session.Step());
    losses.push_back(d.step.loss);
    rank_peaks = d.rank_peak_memory_bytes;
    build_peaks = d.rank_build_peak_memory_bytes;
    if (!store) continue;
    KP_RETURN_IF_ERROR(LogStep(*store, run.id, d));
    if (d.step.step == 1 || d.step.step % log_every == 0 || d.step.step == config.steps)
      Progress(env, ProgressLine(d.step, config.steps));
  }
  if (!store) return Status::Ok();
  json result = {{"run_id", run.id},          {"model", config.model.name}, {"world", rv.world_size},
                 {"backend", session.backend()}, {"layout", LayoutJson(layout)}, {"steps", config.steps},
                 {"first_loss", losses.front()}, {"last_loss", losses.back()},
                 {"peak_memory_bytes_by_rank", rank_peaks}, {"build_peak_memory_bytes_by_rank", build_peaks}};
  if (vm.count("json")) env.out << result.dump(2) << "\n";
  else
    env.out << "kimi-plan run #" << run.id << ": " << config.model.name << " on " << rv.world_size << " ranks, loss "
            << std::fixed << std::setprecision(4) << losses.front() << " -> " << losses.back() << " over "
            << config.steps << " steps\n"
            << "peak memory by rank: " << MegabyteList(rank_peaks) << "\n";
  return Status::Ok();
}

Status RunRank(const po::variables_map& vm, const TrainConfig& config, const ParallelLayout& layout,
               const runtime::Rendezvous& rv, CliEnv& env) {
  const runtime::C10dOptions c10d = C10dFromFlags(vm, config.device, env);
  // Rank 0 alone writes the store; it opens it first so a bad --db fails
  // before any peer waits on it.
  std::unique_ptr<Store> store;
  if (rv.rank == 0) {
    KP_RETURN_IF_ERROR(runtime::ValidateLayout(layout, rv.world_size, config));
    KP_ASSIGN_OR_RETURN(store, Store::Open(vm["db"].as<std::string>(), env.clock));
  }
  KP_ASSIGN_OR_RETURN(std::unique_ptr<runtime::DistTrainSession> session,
                      runtime::DistTrainSession::Create(config, layout, rv, c10d, env.fs));
  RunRecord run;
  if (store) {
    run.kind = "run";
    run.model = config.model.name;
    json cfg = json::parse(runtime::TrainConfigJson(config));
    cfg["layout"] = LayoutJson(layout);
    cfg["world"] = rv.world_size;
    cfg["backend"] = session->backend();
    cfg["timeout_s"] = c10d.timeout_s;
    // The plan it ran, so that `kimi-plan report` sets the plan's
    // predictions beside this run's measurements.
    cfg["plan_id"] = vm.count("plan") ? json(vm["plan"].as<std::int64_t>()) : json(nullptr);
    run.config_json = cfg.dump();
    NameRecordingProcess(env, &run);
    KP_ASSIGN_OR_RETURN(run.id, store->CreateRun(run));
    std::ostringstream line;
    line << "run #" << run.id << ": " << config.model.name << " on " << rv.world_size << " ranks ("
         << session->backend() << ", pp " << layout.pp << " dp " << layout.dp << " ep " << layout.ep << " etp "
         << layout.etp << " cp " << layout.cp << " tp "
         << layout.tp << (layout.tp > 1 && layout.sequence_parallel ? " with SP" : "") << "), "
         << config.batch << " x " << config.seq_len << " tokens per step, " << session->data_description();
    Progress(env, line.str());
  }
  const Status outcome = RankSteps(vm, config, layout, rv, *session, store.get(), run, env);
  return store ? EndRunWith(*store, run.id, outcome) : outcome;
}

}  // namespace

Status RunCommand(const std::vector<std::string>& args, CliEnv& env) {
  const po::options_description desc = RunOptions();
  KP_RETURN_IF_ERROR(RefuseUnexecutedFlags(args, desc));
  po::variables_map vm;
  KP_ASSIGN_OR_RETURN(const bool proceed, ParseCommand(args, desc, &vm, env.out));
  if (!proceed) return Status::Ok();
  KP_ASSIGN_OR_RETURN(const std::optional<PlanRequest> plan, RunPlan(vm, env));
  KP_ASSIGN_OR_RETURN(const TrainConfig config, BuildRunConfig(vm, env, plan));
  PrepareDevice(config, env);
  const char* rank = env.getenv("RANK");
  if (rank == nullptr || *rank == '\0') {
    if (!vm.count("nproc"))
      return Status::InvalidArgument("--nproc: required unless RANK is set (the torchrun-style environment)");
    const int nproc = vm["nproc"].as<int>();
    if (nproc < 1) return Status::InvalidArgument("--nproc: must be a positive integer, got " + std::to_string(nproc));
    KP_RETURN_IF_ERROR(CheckLocalRankCapacity(nproc, "--nproc", env));
    // Everything a rank would refuse is refused here, before any starts.
    KP_ASSIGN_OR_RETURN(const ParallelLayout layout, BuildRunLayout(vm, nproc, config.model, plan));
    KP_RETURN_IF_ERROR(runtime::ValidateLayout(layout, nproc, config));
    KP_RETURN_IF_ERROR(CheckRankShares(vm, config, layout, env));
    KP_RETURN_IF_ERROR(runtime::CheckDeviceAndBackend(C10dFromFlags(vm, config.device, env)));
    return LaunchLocalRanks("run", args, nproc, vm["db"].as<std::string>(), env);
  }
  KP_ASSIGN_OR_RETURN(const runtime::Rendezvous rv, runtime::RendezvousFromEnvironment(env.getenv));
  if (vm.count("nproc") && vm["nproc"].as<int>() != rv.world_size)
    return Status::InvalidArgument("--nproc: " + std::to_string(vm["nproc"].as<int>()) + " but WORLD_SIZE is " +
                                   std::to_string(rv.world_size));
  KP_ASSIGN_OR_RETURN(const ParallelLayout layout, BuildRunLayout(vm, rv.world_size, config.model, plan));
  return RunRank(vm, config, layout, rv, env);
}

}  // namespace kp
