#include "cli/cli.h"

#include <string>

#include "cli/commands.h"
#include "cli/dispatch.h"

namespace kp {

namespace {

// Hands the whole command line to kimi-plan-runtime; returns only when it
// could not be started.
Status Forward(const std::string& name, const std::vector<std::string>& args, CliEnv& env) {
  std::vector<std::string> line = {"--log-level", env.log_level, name};
  line.insert(line.end(), args.begin(), args.end());
  if (!env.exec) return Status::Internal("this environment cannot start " + env.runtime_program);
  return env.exec(env.runtime_program, line);
}

Status NoRuntime(const std::string& name) {
  return Status::InvalidArgument("this build has no LibTorch: '" + name + "' runs in " + std::string(kRuntimeProgram) +
                                 ", which is not installed beside kimi-plan (configure with LibTorch to build it)");
}

// The commands that train live in kimi-plan-runtime, so that this
// executable starts without loading LibTorch. Without it they are not
// listed in the usage (the tests read it to learn what this build runs)
// but still answer: calibrate checks its flags and refuses, the others
// refuse at once.
Subcommand RuntimeSubcommand(const RuntimeCommandInfo& c, bool runtime) {
  const std::string name = c.name;
  if (runtime)
    return {c.name, c.summary, [name](const std::vector<std::string>& a, CliEnv& e) { return Forward(name, a, e); }};
  if (name == "calibrate") return {c.name, c.summary, CalibrateCommand};
  return {c.name, "", [name](const std::vector<std::string>&, CliEnv&) { return NoRuntime(name); }};
}

std::vector<Subcommand> LightCommands(const CliEnv& env) {
  std::vector<Subcommand> all = {
      {"plan", "size TP/PP/VP/EP/ETP/CP/DP and memory per GPU for a model on a cluster", PlanCommand},
      {"simulate", "simulate pipeline schedules, the AttnRes transport, weight sync and the SDPO loop", SimulateCommand},
      {"launch", "write and start the Slurm or Modal job of a plan, or run it here", LaunchCommand},
      {"report", "list, summarise and compare runs against their plans; CSV, JSON and HTML exports", ReportCommand},
      {"ingest", "read a Verl job's metrics file into the store as a run beside its plan; --follow tails it", IngestCommand},
      {"validate", "the planner's step time and memory against published Megatron-LM measurements", ValidateCommand},
      {"checkpoint", "inspect a safetensors file or Hugging Face checkpoint folder: tensors, dtypes, shapes, shards",
       CheckpointCommand},
  };
  for (const RuntimeCommandInfo& c : kRuntimeCommands) all.push_back(RuntimeSubcommand(c, !env.runtime_program.empty()));
  return all;
}

}  // namespace

int RunCli(const std::vector<std::string>& command_line, CliEnv& env) {
  return DispatchCommands("kimi-plan", LightCommands(env), command_line, env);
}

}  // namespace kp
