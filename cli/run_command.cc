// `kimi-plan run`: the distributed runtime. Without RANK in the environment
// and with --nproc N it is the local launcher: it starts N ranks of this
// executable and watches them. With RANK set (srun, Modal, or the launcher)
// it is one rank: it meets the others over c10d and trains, rank 0 logging
// to the store; the session and its loop are `train`'s (cli/training_loop.h).
// Sees the runtime only through runtime/train/train_session.h, which
// includes no LibTorch. docs/runtime.md ("Distributed runs") describes it.

#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/log.h"
#include "cli/output_paths.h"
#include "cli/local_ranks.h"
#include "cli/options.h"
#include "common/limits.h"
#include "cli/run_status.h"
#include "cli/run_options.h"
#include "cli/runtime_options.h"
#include "cli/training_loop.h"
#include "planner/plan_json.h"
#include "planner/schedule_model.h"
#include "runtime/comm/device_check.h"
#include "runtime/train/train_session.h"
#include "runtime/model/runtime_config.h"
#include "specs/param_count.h"
#include "specs/presets.h"
#include "store/store.h"

namespace kp {

namespace {

using nlohmann::json;
using runtime::ParallelLayout;
using runtime::TrainConfig;

std::string MegabyteList(const std::vector<double>& bytes) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(1);
  for (size_t r = 0; r < bytes.size(); ++r) o << (r ? ", " : "") << bytes[r] / 1e6 << " MB";
  return o.str();
}

// The rank's steps after the run's row exists (rank 0) and its summary.
Status RankSteps(const po::variables_map& vm, const TrainConfig& config, const ParallelLayout& layout,
                 const runtime::Rendezvous& rv, runtime::TrainSession& session, Store* store,
                 const RunRecord& run, CliEnv& env) {
  KP_ASSIGN_OR_RETURN(const TrainingLoopResult loop,
                      RunTrainingLoop(session, config, LoopOptionsFrom(vm), store, run.id, env));
  if (!store) return Status::Ok();
  const std::vector<double>& losses = loop.losses;
  if (losses.empty()) {
    env.out << "nothing to do: the checkpoint is already at step " << session.step() << "\n";
    return Status::Ok();
  }
  json result = {{"run_id", run.id},          {"model", config.model.name}, {"world", rv.world_size},
                 {"backend", session.backend()}, {"layout", LayoutJson(layout)},
                 {"steps", config.steps},        {"first_step", loop.first_step},
                 {"first_loss", losses.front()}, {"last_loss", losses.back()},
                 {"peak_memory_bytes_by_rank", loop.rank_peak_memory_bytes},
                 {"build_peak_memory_bytes_by_rank", loop.rank_build_peak_memory_bytes},
                 {"checkpoint", loop.checkpoint.empty() ? json(nullptr) : json(loop.checkpoint)},
                 {"save", loop.save.empty() ? json(nullptr) : json(loop.save)}};
  if (vm.count("json")) env.out << result.dump(2) << "\n";
  else
    env.out << "kimi-plan run #" << run.id << ": " << config.model.name << " on " << rv.world_size << " ranks, loss "
            << std::fixed << std::setprecision(4) << losses.front() << " -> " << losses.back() << " over steps "
            << loop.first_step << ".." << config.steps << "\n"
            << "peak memory by rank: " << MegabyteList(loop.rank_peak_memory_bytes) << "\n"
            << (loop.checkpoint.empty() ? "" : "checkpoint " + loop.checkpoint + "\n")
            << (loop.save.empty() ? "" : "save " + loop.save + "\n");
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
  KP_ASSIGN_OR_RETURN(std::unique_ptr<runtime::TrainSession> session,
                      runtime::TrainSession::Create(config, layout, rv, c10d, env.fs));
  RunRecord run;
  if (store) {
    run.kind = "run";
    run.model = config.model.name;
    json cfg = SessionConfigJson(config, layout, *session);
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
    if (session->step() > 0) Progress(env, "resumed at step " + std::to_string(session->step()) + " from " + config.resume);
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
  KP_RETURN_IF_ERROR(CheckOutputDirectory(vm, env, "checkpoint-dir"));
  KP_RETURN_IF_ERROR(CheckOutputDirectory(vm, env, "save"));
  KP_RETURN_IF_ERROR(CheckDistinctPaths(vm, env, {"db", "data", "resume"}));
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
