// kimi-plan-runtime's dispatch: the commands that link LibTorch. `kimi-plan`
// hands these command lines here (cli.cc), so users keep typing
// `kimi-plan train`.
#include <map>

#include "cli/calibrate_command.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/dispatch.h"

namespace kp {

int RunRuntimeCli(const std::vector<std::string>& args, CliEnv& env) {
  using Run = Status (*)(const std::vector<std::string>&, CliEnv&);
  const std::map<std::string, Run> runs = {
      {"train", TrainCommand}, {"run", RunCommand}, {"sdpo", SdpoCommand}, {"calibrate", RuntimeCalibrateCommand},
      {"profile", ProfileCommand}, {"logits", LogitsCommand}};
  std::vector<Subcommand> commands;
  for (const RuntimeCommandInfo& c : kRuntimeCommands) commands.push_back({c.name, c.summary, runs.at(c.name)});
  return DispatchCommands(kRuntimeProgram, commands, args, env);
}

}  // namespace kp
