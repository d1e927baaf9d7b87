// kimi-plan-runtime: the commands that link LibTorch (train, run, sdpo,
// calibrate). Users reach it through `kimi-plan <command>`; the ranks of a
// multi-process run start it directly (env.program). Sets the process
// environment LibTorch reads before anything else, and is the only place
// that exits.
#include <cstdlib>

#include "cli/cli.h"
#include "cli/local_ranks.h"
#include "cli/program.h"
#include "runtime/comm/environment.h"

int main(int argc, char** argv) {
  // A rank of the local launcher dies with it; before any thread starts.
  kp::PrepareLocalRank([](const char* name) { return std::getenv(name); });
  for (const kp::runtime::EnvironmentDefault& d : kp::runtime::kEnvironmentDefaults)
    setenv(d.name, d.value, /*overwrite=*/0);
  kp::RealServices services;
  kp::CliEnv env = kp::RealCliEnv(services, argv[0]);
  env.setenv = [](const char* name, const char* value) { setenv(name, value, /*overwrite=*/0); };
  return kp::RunRuntimeCli(std::vector<std::string>(argv + 1, argv + argc), env);
}
