// Starts the ranks of a multi-process command on this machine (`kimi-plan run
// --nproc N`, `kimi-plan sdpo --placement split`): N copies of this executable
// with the torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT) and a c10d
// FileStore in the temporary directory, through CliEnv::processes.
#ifndef KIMI_PLAN_CLI_LOCAL_RANKS_H_
#define KIMI_PLAN_CLI_LOCAL_RANKS_H_

#include <string>
#include <vector>

#include "cli/options.h"
#include "common/status.h"

namespace kp {

/// Runs `kimi-plan COMMAND ARGS` (without --nproc) as `nproc` ranks and waits
/// for all of them. The first rank to fail has the others stopped (SIGTERM)
/// and is named in the error: InvalidArgument when it exited with 2 (bad
/// input), IoError otherwise.
Status LaunchLocalRanks(const std::string& command, const std::vector<std::string>& args, int nproc, CliEnv& env);

}  // namespace kp

#endif  // KIMI_PLAN_CLI_LOCAL_RANKS_H_
