#include "cli/training_loop.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "cli/log.h"
#include "common/limits.h"

namespace kp {

namespace {

std::string ProgressLine(const runtime::StepMetrics& m, int steps) {
  std::ostringstream o;
  o << "step " << std::setw(5) << m.step << "/" << steps << "  loss " << std::fixed << std::setprecision(4) << m.loss
    << "  grad-norm " << std::setprecision(3) << m.grad_norm << "  lr " << std::scientific << std::setprecision(2)
    << m.lr << std::fixed << std::setprecision(0) << "  " << m.tokens_per_s << " tok/s  peak "
    << m.peak_memory_bytes / 1e6 << " MB";
  return o.str();
}

Status LogStep(Store& store, std::int64_t run_id, const runtime::SessionStepMetrics& d) {
  const runtime::StepMetrics& m = d.step;
  StepRecord rec{run_id, m.step, m.loss, m.grad_norm, m.lr, m.tokens_per_s, m.step_seconds, m.peak_memory_bytes, ""};
  KP_RETURN_IF_ERROR(store.AppendStep(rec));
  std::vector<TrafficRecord> rows;
  for (const runtime::TrafficRow& t : d.traffic) rows.push_back({run_id, m.step, t.stage, t.direction, t.entries, t.bytes});
  return store.AppendTraffic(rows);
}

// Every rank saves its own file of the checkpoint; the directory is made by
// whichever rank comes first.
Result<std::string> SaveCheckpoint(const runtime::TrainSession& session, const FileSystem& fs, const std::string& dir) {
  const Status made = fs.CreateDirectories(dir);
  if (!made.ok()) return Status::IoError("--checkpoint-dir: " + made.message());
  const std::string path = dir + "/step-" + std::to_string(session.step()) + ".pt";
  KP_RETURN_IF_ERROR(session.SaveCheckpoint(path));
  return path;
}

}  // namespace

nlohmann::json LayoutJson(const runtime::ParallelLayout& l) {
  return {{"pp", l.pp}, {"vp", l.vp}, {"dp", l.dp}, {"ep", l.ep}, {"etp", l.etp}, {"cp", l.cp}, {"tp", l.tp},
          {"sequence_parallel", l.tp > 1 && l.sequence_parallel}, {"schedule", l.schedule},
          {"attnres_cache", l.attnres_cache}, {"stage_layers", LayerCounts(l.split)},
          {"micro_batch", l.micro_batch}};
}

nlohmann::json SessionConfigJson(const runtime::TrainConfig& config, const runtime::ParallelLayout& layout,
                                 const runtime::TrainSession& session) {
  nlohmann::json cfg = nlohmann::json::parse(runtime::TrainConfigJson(config));
  cfg["layout"] = LayoutJson(layout);
  cfg["world"] = session.world_size();
  cfg["backend"] = session.backend();
  return cfg;
}

void AddCheckpointOptions(po::options_description& desc) {
  desc.add_options()
      ("resume", po::value<std::string>(), "continue from this checkpoint (a run's: the step-N.pt rank 0 names)")
      ("init-from", po::value<std::string>(),
       "start from the weights of this Hugging Face checkpoint folder (Kimi K2 / K2.6, DeepSeek-V3 names; "
       "INT4 experts dequantized); each rank reads only its slices")
      ("checkpoint-dir", po::value<std::string>(),
       "write step-N.pt checkpoints here (at the end, and every --checkpoint-every); each rank of a run its own file")
      ("checkpoint-every", IntFlag(0, limits::kMaxTrainSteps)->default_value(0),
       "steps between checkpoints (0: only at the end)")
      ("save", po::value<std::string>(),
       "write layout-free saves here (DIR/step-N, DIR/latest): the weights under the released names with the "
       "optimizer's state (LoRA adapters beside them), each rank its pieces; --resume DIR continues on any layout, "
       "checkpoint export serves it")
      ("save-every", IntFlag(0, limits::kMaxTrainSteps)->default_value(0),
       "steps between saves (0: only at the end)");
}

Status ReadCheckpointFlags(const po::variables_map& vm, runtime::TrainConfig* config) {
  if (vm.count("resume")) config->resume = vm["resume"].as<std::string>();
  if (vm.count("init-from")) config->init_from = vm["init-from"].as<std::string>();
  KP_RETURN_IF_ERROR(FlagNeeds(vm, "save-every", vm.count("save") > 0, "--save"));
  return Status::Ok();
}

TrainingLoopOptions LoopOptionsFrom(const po::variables_map& vm) {
  TrainingLoopOptions o;
  o.log_every = vm["log-every"].as<int>();
  o.checkpoint_every = vm["checkpoint-every"].as<int>();
  if (vm.count("checkpoint-dir")) o.checkpoint_dir = vm["checkpoint-dir"].as<std::string>();
  o.save_every = vm["save-every"].as<int>();
  if (vm.count("save")) o.save_dir = vm["save"].as<std::string>();
  return o;
}

Result<TrainingLoopResult> RunTrainingLoop(runtime::TrainSession& session, const runtime::TrainConfig& config,
                                           const TrainingLoopOptions& options, Store* store, std::int64_t run_id,
                                           CliEnv& env) {
  TrainingLoopResult out;
  out.first_step = session.step() + 1;
  while (session.step() < config.steps) {
    KP_ASSIGN_OR_RETURN(const runtime::SessionStepMetrics d, session.Step());
    const runtime::StepMetrics& m = d.step;
    out.losses.push_back(m.loss);
    out.tokens_per_s.push_back(m.tokens_per_s);
    out.peak_memory_bytes = std::max(out.peak_memory_bytes, m.peak_memory_bytes);
    out.rank_peak_memory_bytes = d.rank_peak_memory_bytes;
    out.rank_build_peak_memory_bytes = d.rank_build_peak_memory_bytes;
    if (store) {
      KP_RETURN_IF_ERROR(LogStep(*store, run_id, d));
      if (m.step == out.first_step || m.step % options.log_every == 0 || m.step == config.steps)
        Progress(env, ProgressLine(m, config.steps));
    }
    if (!options.checkpoint_dir.empty() && options.checkpoint_every > 0 && m.step % options.checkpoint_every == 0 &&
        m.step != config.steps) {
      KP_ASSIGN_OR_RETURN(out.checkpoint, SaveCheckpoint(session, env.fs, options.checkpoint_dir));
    }
    if (!options.save_dir.empty() && options.save_every > 0 && m.step % options.save_every == 0 &&
        m.step != config.steps) {
      KP_RETURN_IF_ERROR(session.SaveShards(options.save_dir));
      out.save = options.save_dir + "/step-" + std::to_string(m.step);
    }
  }
  if (!options.checkpoint_dir.empty()) {
    KP_ASSIGN_OR_RETURN(out.checkpoint, SaveCheckpoint(session, env.fs, options.checkpoint_dir));
  }
  if (!options.save_dir.empty()) {
    KP_RETURN_IF_ERROR(session.SaveShards(options.save_dir));
    out.save = options.save_dir + "/step-" + std::to_string(session.step());
  }
  return out;
}

}  // namespace kp
