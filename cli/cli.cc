#include "cli/cli.h"

#include <functional>
#include <string>

#include "cli/commands.h"
#include "cli/log.h"

#ifndef KIMI_PLAN_VERSION
#define KIMI_PLAN_VERSION "0.0.0"
#endif

namespace kp {

namespace {

// The error contract is one line: a value that carried a line break (a
// preset name, a path) is shown with the break escaped.
std::string OneLine(const std::string& message) {
  std::string out;
  for (char c : message) {
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else out += c;
  }
  return out;
}

struct Subcommand {
  const char* name;
  const char* summary;
  std::function<Status(const std::vector<std::string>&, CliEnv&)> run;
};

const std::vector<Subcommand>& Subcommands() {
  static const std::vector<Subcommand> kAll = {
      {"plan", "size TP/PP/VP/EP/ETP/CP/DP and memory per GPU for a model on a cluster", PlanCommand},
      {"simulate", "simulate pipeline schedules, the AttnRes transport, weight sync and the SDPO loop", SimulateCommand},
      {"launch", "write and start the Slurm or Modal job of a plan, or run it here", LaunchCommand},
      {"report", "list, summarise and compare runs against their plans; CSV, JSON and HTML exports", ReportCommand},
      {"validate", "the planner's step time and memory against published Megatron-LM measurements", ValidateCommand},
      {"calibrate", "measure this GPU's matrix products and copy bandwidth into a calibration table", CalibrateCommand},
#ifdef KIMI_PLAN_HAS_TORCH
      {"train", "train the model in this process (LibTorch): AdamW, LoRA, checkpoints", TrainCommand},
      {"run", "train over several processes (c10d Gloo/NCCL): data and expert parallelism", RunCommand},
      {"sdpo", "run the SDPO loop: rollout, feedback, self-teacher, training, weight sync", SdpoCommand},
#endif
  };
  return kAll;
}

void PrintUsage(std::ostream& out) {
  out << "usage: kimi-plan [--version] [--help] [--log-level LEVEL] <command> [<args>]\n\n"
         "Plans, simulates, launches and analyses distributed SDPO post-training of\n"
         "trillion-parameter MoE models.\n\ncommands:\n";
  for (const Subcommand& s : Subcommands()) out << "  " << s.name << std::string(12 - std::string(s.name).size(), ' ') << s.summary << "\n";
  out << "\n'kimi-plan <command> --help' describes one command. --log-level (trace, debug, info, warn,\n"
         "error, off; default info) sets what progress goes to stderr; warn keeps warnings and errors.\n";
}

}  // namespace

int RunCli(const std::vector<std::string>& command_line, CliEnv& env) {
  std::vector<std::string> args = command_line;
  Result<std::string> level = TakeLogLevel(args);
  if (!level.ok()) {
    env.err << "kimi-plan: " << level.status().message() << "\n";
    return 2;
  }
  env.log_level = *level;
  env.log = MakeLogger(env.err, env.log_level, RankTag(env));
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    PrintUsage(args.empty() ? env.err : env.out);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    env.out << "kimi-plan " << KIMI_PLAN_VERSION << "\n";
    return 0;
  }
  for (const Subcommand& s : Subcommands()) {
    if (args[0] != s.name) continue;
    Status st = s.run(std::vector<std::string>(args.begin() + 1, args.end()), env);
    if (!st.ok()) env.err << "kimi-plan " << s.name << ": " << OneLine(st.message()) << "\n";
    return st.ExitCode();
  }
  env.err << "kimi-plan: '" << args[0] << "' is not a command (see 'kimi-plan --help')\n";
  return 2;
}

}  // namespace kp
