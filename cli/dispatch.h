// The git-style dispatch shared by the two executables: `kimi-plan` (the
// light commands, no LibTorch) and `kimi-plan-runtime` (the commands that
// train). Each names its subcommands in a table; this file parses the global
// flags, prints the usage and runs the one named.
#ifndef KIMI_PLAN_CLI_DISPATCH_H_
#define KIMI_PLAN_CLI_DISPATCH_H_

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "common/status.h"

namespace kp {

struct Subcommand {
  const char* name;
  const char* summary;  ///< empty: dispatched but not listed in the usage
  std::function<Status(const std::vector<std::string>&, CliEnv&)> run;
};

/// Runs `args` (without the program name) against `commands`: --log-level
/// anywhere, --help, --version, then the subcommand. `program` names the
/// executable in the usage and in each error line. Returns the exit code.
int DispatchCommands(const char* program, const std::vector<Subcommand>& commands,
                     const std::vector<std::string>& args, CliEnv& env);

/// Flushes `out` and says whether everything written to it arrived: IoError
/// "cannot write the output to standard output (No space left on device)"
/// otherwise. A command that records what it prints calls it inside the
/// store's transaction, so that nothing is recorded that was not reported.
Status CheckOutput(std::ostream& out);

}  // namespace kp

#endif  // KIMI_PLAN_CLI_DISPATCH_H_
