// `kimi-plan simulate <what>`: dispatches to one simulation.
#include "cli/commands.h"
#include "cli/simulate_commands.h"

namespace kp {

namespace {

struct Simulation {
  const char* name;
  const char* summary;
  Status (*run)(const std::vector<std::string>&, CliEnv&);
};

const Simulation kSimulations[] = {
    {"pipeline", "one step of a pipeline schedule: makespan, bubble, idle and peak in flight per rank", SimulatePipelineCommand},
    {"sync", "trainer -> rollout weight sync: sizes from the model, TCP vs RDMA, broadcast to R nodes", SimulateSyncCommand},
    {"loop", "the SDPO loop's five systems on a placement: step time, shares, GPU idle", SimulateLoopCommand},
    {"attnres", "PR #4312's block transport: entries per hop with and without the rank cache", SimulateAttnResCommand},
};

}  // namespace

Status SimulateCommand(const std::vector<std::string>& args, CliEnv& env) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::ostream& out = args.empty() ? env.err : env.out;
    out << "usage: kimi-plan simulate <what> [options]\n\n";
    for (const Simulation& s : kSimulations)
      out << "  " << s.name << std::string(10 - std::string(s.name).size(), ' ') << s.summary << "\n";
    out << "\n'kimi-plan simulate <what> --help' describes one.\n";
    return args.empty() ? Status::InvalidArgument("simulate: name what to simulate") : Status::Ok();
  }
  for (const Simulation& s : kSimulations)
    if (args[0] == s.name) return s.run(std::vector<std::string>(args.begin() + 1, args.end()), env);
  std::string known;
  for (const Simulation& s : kSimulations) known += std::string(known.empty() ? "" : ", ") + s.name;
  return Status::InvalidArgument("simulate: unknown simulation \"" + args[0] + "\" (allowed: " + known + ")");
}

}  // namespace kp
