// The kimi-plan executable: the real environment handed to the CLI, and the
// only place that exits.
#include <iostream>

#include "cli/cli.h"
#include "specs/presets.h"

int main(int argc, char** argv) {
  kp::RealFileSystem fs;
  kp::SystemClock clock;
  kp::CliEnv env{std::cout, std::cerr, fs, clock, kp::DefaultPresetDir()};
  return kp::RunCli(std::vector<std::string>(argv + 1, argv + argc), env);
}
