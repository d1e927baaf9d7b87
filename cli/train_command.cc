// `kimi-plan train`: trains the runtime's model in this process, the
// training session of `run` on a world of one (docs/runtime.md), logging
// every step to the store and progress to stderr (cli/training_loop.h).
// Sees the runtime only through runtime/train/train_session.h, which
// includes no LibTorch.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/log.h"
#include "cli/output_paths.h"
#include "cli/options.h"
#include "common/limits.h"
#include "cli/run_status.h"
#include "cli/runtime_options.h"
#include "cli/training_loop.h"
#include "common/stats.h"
#include "common/table.h"
#include "runtime/model/runtime_config.h"
#include "runtime/train/train_session.h"
#include "specs/presets.h"
#include "store/store.h"

namespace kp {

namespace {

using nlohmann::json;
using runtime::TrainConfig;

po::options_description TrainOptions() {
  po::options_description desc("kimi-plan train [options]\n\n"
                               "Trains the runtime's model (LibTorch) in this process: AdamW, gradient clipping,\n"
                               "checkpoints, every step logged to the store. Options");
  AddScaledModelOptions(desc);
  desc.add_options()("help,h", "this text");
  AddTrainOptions(desc, TrainConfig{}, /*steps_required=*/true, /*log_every=*/10);
  desc.add_options()
      ("batch", IntFlag(1, limits::kMaxBatch)->default_value(8), "sequences per step")
      ("seq-len", IntFlag(1, limits::kMaxSequence)->default_value(64), "tokens per sequence")
      ("weight-decay", NumberFlag(0, 10)->default_value(0.1), "AdamW weight decay on matrices")
      ("bias-update-rate", NumberFlag(0, 1), "router-bias step per optimizer step (default 1e-3; 0 with LoRA)")
      ("lora-rank", IntFlag(0, limits::kMaxHidden)->default_value(0), "LoRA rank (0: full training)")
      ("lora-alpha", NumberFlag(0, 1e6, /*min_open=*/true), "LoRA alpha (default 2 x rank)")
      ("lora-experts", po::value<std::string>()->default_value("shared-outer"), "shared-outer | per-expert")
      ("save-adapters", po::value<std::string>(), "with --lora-rank: write the adapters alone to this file at the end")
      ("dtype", po::value<std::string>()->default_value("fp32"), "fp32 | bf16 (activations; fp32 master weights)")
      ("activation-checkpointing", po::value<std::string>()->default_value("off"), "on | off: recompute each layer in backward")
      ("deterministic", po::value<std::string>()->default_value("on"), "on | off: deterministic algorithms")
      ("data", po::value<std::string>()->default_value("synthetic"), "synthetic | a token file (nanoGPT .bin)")
      ("token-dtype", po::value<std::string>()->default_value("uint16"), "uint16 | uint32: the token file's width");
  AddCheckpointOptions(desc);
  AddOutputOptions(desc);
  return desc;
}

Result<TrainConfig> BuildTrainConfig(const po::variables_map& vm, const CliEnv& env) {
  TrainConfig c;
  KP_ASSIGN_OR_RETURN(c.model, ResolveScaledModel(vm, env));
  KP_RETURN_IF_ERROR(ReadTrainOptions(vm, &c));
  c.batch = vm["batch"].as<int>();
  c.seq_len = vm["seq-len"].as<int>();
  c.weight_decay = vm["weight-decay"].as<double>();
  c.lora.rank = vm["lora-rank"].as<int>();
  c.lora.alpha = vm.count("lora-alpha") ? vm["lora-alpha"].as<double>() : 2.0 * c.lora.rank;
  const std::string experts = vm["lora-experts"].as<std::string>();
  if (experts == "per-expert") c.lora.experts = runtime::LoraExperts::kPerExpert;
  else if (experts != "shared-outer")
    return Status::InvalidArgument("--lora-experts: must be shared-outer or per-expert, got \"" + experts + "\"");
  // Under LoRA the router is part of the frozen base: its bias stays put.
  c.bias_update_rate = vm.count("bias-update-rate") ? vm["bias-update-rate"].as<double>()
                                                    : (c.lora.enabled() ? 0.0 : 1e-3);
  KP_ASSIGN_OR_RETURN(c.options.dtype, runtime::ParseDType(vm["dtype"].as<std::string>()));
  KP_ASSIGN_OR_RETURN(c.options.activation_checkpointing, OnOff(vm, "activation-checkpointing", false));
  KP_ASSIGN_OR_RETURN(c.deterministic, OnOff(vm, "deterministic", true));
  c.data.source = vm["data"].as<std::string>();
  const std::string width = vm["token-dtype"].as<std::string>();
  if (width != "uint16" && width != "uint32")
    return Status::InvalidArgument("--token-dtype: must be uint16 or uint32, got \"" + width + "\"");
  c.data.token_bytes = width == "uint16" ? 2 : 4;
  KP_RETURN_IF_ERROR(ReadCheckpointFlags(vm, &c));
  if (vm.count("save-adapters") && !c.lora.enabled())
    return Status::InvalidArgument("--save-adapters: needs --lora-rank > 0");
  return c;
}

std::string Millions(double n) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(2) << n / 1e6 << "M";
  return o.str();
}

// The run's steps, checkpoints and summary, after its row exists: whatever
// ends it is recorded as the run's end.
Status TrainRun(const po::variables_map& vm, const TrainConfig& config, runtime::TrainSession& session,
                Store& store, const RunRecord& run, CliEnv& env) {
  Progress(env, "train run #" + std::to_string(run.id) + ": " + config.model.name + ", " +
                    Millions(session.parameter_count()) + " parameters (" + Millions(session.trainable_count()) +
                    " trainable), " + runtime::DTypeName(config.options.dtype) + ", " + std::to_string(config.batch) +
                    " x " + std::to_string(config.seq_len) + " tokens per step, " + session.data_description());
  if (session.step() > 0)
    Progress(env, "resumed at step " + std::to_string(session.step()) + " from " + config.resume);

  KP_ASSIGN_OR_RETURN(const TrainingLoopResult loop,
                      RunTrainingLoop(session, config, LoopOptionsFrom(vm), &store, run.id, env));
  if (vm.count("save-adapters")) KP_RETURN_IF_ERROR(session.SaveAdapters(vm["save-adapters"].as<std::string>()));
  const std::vector<double>& losses = loop.losses;
  const std::vector<double>& speeds = loop.tokens_per_s;
  const double peak = loop.peak_memory_bytes;
  const int first_step = loop.first_step;
  const std::string& checkpoint = loop.checkpoint;

  const std::size_t n = losses.size(), tenth = std::max<std::size_t>(1, n / 10);
  json result = {{"run_id", run.id},
                 {"model", config.model.name},
                 {"parameters", session.parameter_count()},
                 {"trainable_parameters", session.trainable_count()},
                 {"dtype", runtime::DTypeName(config.options.dtype)},
                 {"first_step", first_step},
                 {"last_step", session.step()},
                 {"first_loss", n ? json(losses.front()) : json(nullptr)},
                 {"last_loss", n ? json(losses.back()) : json(nullptr)},
                 {"first_tenth_mean_loss", n ? json(MeanOf(losses, 0, tenth)) : json(nullptr)},
                 {"last_tenth_mean_loss", n ? json(MeanOf(losses, n - tenth, n)) : json(nullptr)},
                 {"median_tokens_per_s", Median(speeds)},
                 {"peak_memory_bytes", peak},
                 {"checkpoint", checkpoint.empty() ? json(nullptr) : json(checkpoint)},
                 {"save", loop.save.empty() ? json(nullptr) : json(loop.save)}};
  if (vm.count("json")) {
    env.out << result.dump(2) << "\n";
    return Status::Ok();
  }
  env.out << "kimi-plan train run #" << run.id << ": " << config.model.name << ", "
          << Millions(session.parameter_count()) << " parameters (" << Millions(session.trainable_count())
          << " trainable), " << runtime::DTypeName(config.options.dtype) << "\n";
  if (n == 0) {
    env.out << "nothing to do: the checkpoint is already at step " << session.step() << "\n";
    return Status::Ok();
  }
  env.out << "steps     " << first_step << ".." << session.step() << " of " << config.steps << ", " << config.batch
          << " x " << config.seq_len << " tokens each\n";
  env.out << "loss      " << FormatFixed(losses.front(), 4) << " (step " << first_step << ") -> "
          << FormatFixed(losses.back(), 4) << " (step " << session.step() << "); mean of the first " << tenth
          << " steps " << FormatFixed(MeanOf(losses, 0, tenth), 4) << ", of the last " << tenth << " "
          << FormatFixed(MeanOf(losses, n - tenth, n), 4) << "\n";
  env.out << "speed     " << FormatFixed(Median(speeds), 0) << " tokens/s (median step), peak memory "
          << FormatFixed(peak / 1e6, 0) << " MB\n";
  if (!checkpoint.empty()) env.out << "checkpoint " << checkpoint << "\n";
  if (!loop.save.empty()) env.out << "save " << loop.save << "\n";
  return Status::Ok();
}

}  // namespace

Status TrainCommand(const std::vector<std::string>& args, CliEnv& env) {
  const po::options_description desc = TrainOptions();
  po::variables_map vm;
  KP_ASSIGN_OR_RETURN(const bool proceed, ParseCommand(args, desc, &vm, env.out));
  if (!proceed) return Status::Ok();
  // Before the run's row or any step: a path that cannot be written fails
  // now, not after training (torch::save creates no directory).
  KP_RETURN_IF_ERROR(CheckOutputDirectory(vm, env, "checkpoint-dir"));
  KP_RETURN_IF_ERROR(CheckOutputDirectory(vm, env, "save"));
  KP_RETURN_IF_ERROR(CheckOutputFile(vm, env, "save-adapters", /*create_parent=*/false));
  KP_RETURN_IF_ERROR(CheckDistinctPaths(vm, env, {"db", "data", "resume", "save-adapters"}));
  KP_ASSIGN_OR_RETURN(TrainConfig config, BuildTrainConfig(vm, env));
  PrepareDevice(config, env);
  KP_RETURN_IF_ERROR(CheckTrainMemory(config, env));
  KP_ASSIGN_OR_RETURN(std::unique_ptr<runtime::TrainSession> session, runtime::TrainSession::Create(config, env.fs));
  KP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(vm["db"].as<std::string>(), env.clock));
  RunRecord run;
  run.kind = "train";
  run.model = config.model.name;
  run.config_json = SessionConfigJson(config, runtime::ParallelLayout{}, *session).dump();
  NameRecordingProcess(env, &run);
  KP_ASSIGN_OR_RETURN(run.id, store->CreateRun(run));
  return EndRunWith(*store, run.id, TrainRun(vm, config, *session, *store, run, env));
}

}  // namespace kp
