// What the two executables' mains share: the real services a CliEnv points
// at, this executable's path, and finding kimi-plan-runtime beside it.
#ifndef KIMI_PLAN_CLI_PROGRAM_H_
#define KIMI_PLAN_CLI_PROGRAM_H_

#include <string>

#include "cli/cli.h"
#include "common/clock.h"
#include "common/file_system.h"
#include "common/process_launcher.h"
#include "common/process_table.h"

namespace kp {

/// The machine's file system, clock and processes, owned by main.
struct RealServices {
  RealFileSystem fs;
  SystemClock clock;
  RealProcessLauncher processes;
  RealProcessTable process_table;
};

/// A CliEnv on std::cout / std::cerr and `services`, with env.program from
/// argv[0] (ProgramPath). It sets no environment variable and starts
/// nothing by itself; main fills setenv, exec and runtime_program.
CliEnv RealCliEnv(RealServices& services, const char* argv0);

/// argv[0] as an absolute path when it names a file by a path, so that a
/// job file naming it works from any directory; a bare name is left for
/// PATH to find.
std::string ProgramPath(const char* argv0);

/// `name` in the directory of the running executable (/proc/self/exe) when
/// it is there and executable; empty otherwise.
std::string SiblingExecutable(const std::string& name);

}  // namespace kp

#endif  // KIMI_PLAN_CLI_PROGRAM_H_
