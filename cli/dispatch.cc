#include "cli/dispatch.h"

#include <cerrno>
#include <cstring>

#include "cli/log.h"
#include "common/text.h"

#ifndef KIMI_PLAN_VERSION
#define KIMI_PLAN_VERSION "0.0.0"
#endif

namespace kp {

namespace {

void PrintUsage(std::ostream& out, const char* program, const std::vector<Subcommand>& commands) {
  out << "usage: " << program << " [--version] [--help] [--log-level LEVEL] <command> [<args>]\n\n"
         "Plans, simulates, launches and analyses distributed SDPO post-training of\n"
         "trillion-parameter MoE models.\n\ncommands:\n";
  for (const Subcommand& s : commands) {
    if (!*s.summary) continue;
    const std::string name = s.name;
    out << "  " << name << std::string(name.size() < 12 ? 12 - name.size() : 1, ' ') << s.summary << "\n";
  }
  out << "\n'" << program << " <command> --help' describes one command. --log-level (trace, debug, info, warn,\n"
         "error, off; default info) sets what progress goes to stderr; warn keeps warnings and errors.\n";
}

}  // namespace

Status CheckOutput(std::ostream& out) {
  errno = 0;
  out.flush();
  if (out) return Status::Ok();
  return Status::IoError(std::string("cannot write the output to standard output (") +
                         (errno ? std::strerror(errno) : "write failed") + ")");
}

int DispatchCommands(const char* program, const std::vector<Subcommand>& commands,
                     const std::vector<std::string>& command_line, CliEnv& env) {
  std::vector<std::string> args = command_line;
  Result<std::string> level = TakeLogLevel(args);
  if (!level.ok()) {
    env.err << program << ": " << OneLine(level.status().message()) << "\n";
    return 2;
  }
  env.log_level = *level;
  env.log = MakeLogger(env.err, env.log_level, RankTag(env));
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    PrintUsage(args.empty() ? env.err : env.out, program, commands);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    env.out << "kimi-plan " << KIMI_PLAN_VERSION << "\n";
    return 0;
  }
  for (const Subcommand& s : commands) {
    if (args[0] != s.name) continue;
    Status st = s.run(std::vector<std::string>(args.begin() + 1, args.end()), env);
    // Output that never arrived (a full disk, a closed pipe) is a failure,
    // whatever the command thought; the commands that record check it
    // before they commit (CheckOutput), this catches the rest.
    if (st.ok()) st = CheckOutput(env.out);
    if (!st.ok()) env.err << "kimi-plan " << s.name << ": " << OneLine(st.message()) << "\n";
    return st.ExitCode();
  }
  env.err << program << ": '" << QuoteBounded(args[0]) << "' is not a command (see '" << program << " --help')\n";
  return 2;
}

}  // namespace kp
