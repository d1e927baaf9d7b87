// The kimi-plan executable: the real environment handed to the CLI, the
// only place that sets the process environment, and the only place that exits.
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "cli/cli.h"
#include "runtime/comm/environment.h"
#include "specs/presets.h"

namespace {

// This executable as an absolute path when it was started by one, so that
// a job file naming it works from any directory; a bare name is left for
// PATH to find.
std::string ProgramPath(const char* argv0) {
  const std::string name = argv0;
  if (name.find('/') == std::string::npos) return name;
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(name, ec);
  return ec ? name : abs.lexically_normal().string();
}

}  // namespace

int main(int argc, char** argv) {
  for (const kp::runtime::EnvironmentDefault& d : kp::runtime::kEnvironmentDefaults)
    setenv(d.name, d.value, /*overwrite=*/0);
  kp::RealFileSystem fs;
  kp::SystemClock clock;
  kp::RealProcessLauncher processes;
  kp::RealProcessTable process_table;
  kp::CliEnv env{std::cout, std::cerr, fs, clock, kp::DefaultPresetDir(), &processes, ProgramPath(argv[0])};
  env.process_table = &process_table;
  env.setenv = [](const char* name, const char* value) { setenv(name, value, /*overwrite=*/0); };
  return kp::RunCli(std::vector<std::string>(argv + 1, argv + argc), env);
}
