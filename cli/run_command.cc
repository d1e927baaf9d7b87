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
#include "cli/runtime_options.h"
#include "cli/plan_options.h"
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

// TrainConfig's defaults, but a short run: `run` is mostly a check that a
// layout trains across processes.
TrainConfig RunDefaults() {
  TrainConfig c;
  c.steps = 20;
  return c;
}

po::options_description RunOptions() {
  po::options_description desc("kimi-plan run [options]\n\n"
                               "Trains over several processes: c10d Gloo on CPU, NCCL on CUDA; pipeline, data,\n"
                               "expert and tensor parallelism, composed (rank = (pp_rank * dp + dp_rank) * tp +\n"
                               "tp_rank). --nproc N starts N local ranks; under srun or Modal each process is one\n"
                               "rank told by RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. Options");
  desc.add_options()("help,h", "this text")
      ("nproc", IntFlag(1, limits::kMaxLocalRanks), "start this many local ranks (launcher mode; RANK must be unset)")
      ("plan", Int64Flag(1, INT64_MAX), "take the layout and schedule of this recorded plan (--model still picks the model)")
      ("max-params", NumberFlag(1, 1e15)->default_value(2e9), "refuse a model with more parameters (every rank builds it whole)")
      ("batch", IntFlag(1, limits::kMaxBatch)->default_value(8), "sequences per step, split evenly over dp")
      ("experts", IntFlag(1, limits::kMaxExperts), "scale the model: routed experts")
      ("top-k", IntFlag(1, limits::kMaxExperts), "scale the model: experts per token")
      ("attn-res-block", IntFlag(0, limits::kMaxLayers), "scale the model: attention-residual block size")
      ("dense-layers", IntFlag(0, limits::kMaxLayers), "scale the model: leading dense-FFN layers")
      ("attnres-cache", po::value<std::string>()->default_value("off"), "on | off: the cached AttnRes transport (pipelines)")
      ("backend", po::value<std::string>()->default_value("auto"), "auto | gloo | nccl")
      ("timeout-s", IntFlag(1, 86400)->default_value(120), "seconds any rank waits for a peer before failing");
  AddTrainOptions(desc, RunDefaults(), /*steps_required=*/false, /*log_every=*/10);
  AddPlanRequestOptions(desc);
  AddOutputOptions(desc);
  return desc;
}

Result<TrainConfig> BuildRunConfig(const po::variables_map& vm, const CliEnv& env) {
  TrainConfig c;
  KP_ASSIGN_OR_RETURN(c.model, ResolveScaledModel(vm, env));
  const double params = CountParams(c.model).total, max_params = vm["max-params"].as<double>();
  if (params > max_params) {
    std::ostringstream o;
    o << "--model: " << c.model.name << " has " << std::setprecision(3) << params << " parameters, more than "
      << "--max-params " << max_params << " lets every rank build (take kimi-k3-debug, or scale with --layers --hidden)";
    return Status::InvalidArgument(o.str());
  }
  KP_RETURN_IF_ERROR(ReadTrainOptions(vm, &c));
  c.batch = vm["batch"].as<int>();
  c.seq_len = vm.count("seq-len") ? vm["seq-len"].as<int>() : 64;
  if (vm.count("lora-rank") && (!vm.count("mode") || vm["mode"].as<std::string>() == "lora")) {
    c.lora.rank = vm["lora-rank"].as<int>();
    c.lora.alpha = vm.count("lora-alpha") ? vm["lora-alpha"].as<double>() : 2.0 * c.lora.rank;
  }
  c.bias_update_rate = c.lora.enabled() ? 0.0 : 1e-3;
  // --dtype is the plan's name too; the runtime takes fp32 or bf16 activations.
  KP_ASSIGN_OR_RETURN(c.options.dtype, runtime::ParseDType(vm.count("dtype") ? vm["dtype"].as<std::string>() : "fp32"));
  KP_RETURN_IF_ERROR(runtime::ValidateTrainConfig(c));
  return c;
}

int IntFlag(const po::variables_map& vm, const char* name, int fallback) {
  return vm.count(name) ? vm[name].as<int>() : fallback;
}

// The runtime builds torchtitan's even split: a plan sized on another
// split would run as a different layout than the one predicted.
Status CheckEvenSplit(const PlanRequest& r, std::int64_t id) {
  const int per_rank = StagesPerRank(r.schedule, r.plan.vp);
  Result<StageSplit> even = EvenSplit(r.model.layers, r.plan.pp * per_rank);
  Result<StageSplit> planned = SplitLayers(r.layer_split, r.model.layers, r.plan.pp, per_rank);
  if (even.ok() && planned.ok() && LayerCounts(*even) == LayerCounts(*planned)) return Status::Ok();
  return Status::InvalidArgument("--plan: plan " + std::to_string(id) + " was sized with the " +
                                 r.layer_split.ToString() +
                                 " stage split; the native runtime builds the even split only");
}

// The layout from the flags, or from a recorded plan (--plan); dp defaults
// to the world over pp. Parallelisms the runtime does not execute are refused.
Result<ParallelLayout> BuildLayout(const po::variables_map& vm, const CliEnv& env, int world) {
  ParallelLayout l;
  std::string source = "--";
  int tp = IntFlag(vm, "tp", 1), cp = IntFlag(vm, "cp", 1), etp = IntFlag(vm, "etp", 1), dp = IntFlag(vm, "dp", 0);
  l.pp = IntFlag(vm, "pp", 1);
  l.vp = IntFlag(vm, "vp", 1);
  l.ep = IntFlag(vm, "ep", 1);
  if (vm.count("schedule")) l.schedule = vm["schedule"].as<std::string>();
  if (vm.count("plan")) {
    const std::int64_t id = vm["plan"].as<std::int64_t>();
    const std::string db = vm["db"].as<std::string>();
    if (!env.fs.Exists(db)) return Status::InvalidArgument("--db: " + db + " does not exist (needed by --plan)");
    KP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(db, env.clock, StoreMode::kRead));
    KP_ASSIGN_OR_RETURN(PlanRecord rec, store->GetPlan(id));
    Result<PlanRequest> req = Status::Internal("unparsed");
    try {
      req = RequestFromJson(json::parse(rec.request_json));
    } catch (const std::exception& e) {
      return Status::InvalidArgument("--plan: plan " + std::to_string(id) + " has an unreadable request: " + e.what());
    }
    if (!req.ok()) return Status::InvalidArgument("--plan: " + req.status().message());
    KP_RETURN_IF_ERROR(CheckEvenSplit(*req, id));
    const ParallelPlan& p = req->plan;
    tp = p.tp, cp = p.cp, etp = p.etp, dp = p.dp, l.pp = p.pp, l.vp = p.vp, l.ep = p.ep;
    l.sequence_parallel = req->sequence_parallel;
    l.schedule = ScheduleName(req->schedule);
    source = "--plan " + std::to_string(id) + ": ";
  }
  l.tp = tp;
  l.cp = cp;
  l.etp = etp;
  if (!vm.count("plan")) {
    KP_ASSIGN_OR_RETURN(l.sequence_parallel, OnOff(vm, "sequence-parallel", true));
  }
  l.dp = dp > 0 ? dp : world / std::max(1, l.pp * l.cp * l.tp);
  KP_ASSIGN_OR_RETURN(l.attnres_cache, OnOff(vm, "attnres-cache", false));
  return l;
}

json LayoutJson(const ParallelLayout& l) {
  return {{"pp", l.pp}, {"vp", l.vp}, {"dp", l.dp}, {"ep", l.ep}, {"etp", l.etp}, {"cp", l.cp}, {"tp", l.tp},
          {"sequence_parallel", l.tp > 1 && l.sequence_parallel}, {"schedule", l.schedule},
          {"attnres_cache", l.attnres_cache}};
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
  std::vector<double> losses, rank_peaks;
  while (session.step() < config.steps) {
    KP_ASSIGN_OR_RETURN(runtime::DistStepMetrics d, session.Step());
    losses.push_back(d.step.loss);
    rank_peaks = d.rank_peak_memory_bytes;
    if (!store) continue;
    KP_RETURN_IF_ERROR(LogStep(*store, run.id, d));
    if (d.step.step == 1 || d.step.step % log_every == 0 || d.step.step == config.steps)
      Progress(env, ProgressLine(d.step, config.steps));
  }
  if (!store) return Status::Ok();
  json result = {{"run_id", run.id},          {"model", config.model.name}, {"world", rv.world_size},
                 {"backend", session.backend()}, {"layout", LayoutJson(layout)}, {"steps", config.steps},
                 {"first_loss", losses.front()}, {"last_loss", losses.back()},
                 {"peak_memory_bytes_by_rank", rank_peaks}};
  if (vm.count("json")) env.out << result.dump(2) << "\n";
  else
    env.out << "kimi-plan run #" << run.id << ": " << config.model.name << " on " << rv.world_size << " ranks, loss "
            << std::fixed << std::setprecision(4) << losses.front() << " -> " << losses.back() << " over "
            << config.steps << " steps\n"
            << "peak memory by rank: " << MegabyteList(rank_peaks) << "\n";
  return Status::Ok();
}

Status RunRank(const po::variables_map& vm, const TrainConfig& config, const runtime::Rendezvous& rv, CliEnv& env) {
  KP_ASSIGN_OR_RETURN(const ParallelLayout layout, BuildLayout(vm, env, rv.world_size));
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
  po::variables_map vm;
  KP_ASSIGN_OR_RETURN(const bool proceed, ParseCommand(args, desc, &vm, env.out));
  if (!proceed) return Status::Ok();
  KP_ASSIGN_OR_RETURN(const TrainConfig config, BuildRunConfig(vm, env));
  PrepareDevice(config, env);
  const char* rank = env.getenv("RANK");
  if (rank == nullptr || *rank == '\0') {
    if (!vm.count("nproc"))
      return Status::InvalidArgument("--nproc: required unless RANK is set (the torchrun-style environment)");
    const int nproc = vm["nproc"].as<int>();
    if (nproc < 1) return Status::InvalidArgument("--nproc: must be a positive integer, got " + std::to_string(nproc));
    KP_RETURN_IF_ERROR(CheckLocalRankCapacity(nproc, "--nproc", env));
    // Everything a rank would refuse is refused here, before any starts.
    KP_ASSIGN_OR_RETURN(const ParallelLayout layout, BuildLayout(vm, env, nproc));
    KP_RETURN_IF_ERROR(runtime::ValidateLayout(layout, nproc, config));
    KP_RETURN_IF_ERROR(CheckTrainMemory(config, nproc, env));
    KP_RETURN_IF_ERROR(runtime::CheckDeviceAndBackend(C10dFromFlags(vm, config.device, env)));
    return LaunchLocalRanks("run", args, nproc, vm["db"].as<std::string>(), env);
  }
  KP_ASSIGN_OR_RETURN(const runtime::Rendezvous rv, runtime::RendezvousFromEnvironment(env.getenv));
  if (vm.count("nproc") && vm["nproc"].as<int>() != rv.world_size)
    return Status::InvalidArgument("--nproc: " + std::to_string(vm["nproc"].as<int>()) + " but WORLD_SIZE is " +
                                   std::to_string(rv.world_size));
  return RunRank(vm, config, rv, env);
}

}  // namespace kp
