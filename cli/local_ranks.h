// Starts the ranks of a multi-process command on this machine (`kimi-plan run
// --nproc N`, `kimi-plan sdpo --placement split`): N copies of this executable
// with the torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT), a c10d
// FileStore in the temporary directory and OMP_NUM_THREADS set to each rank's
// share of the cores (common/thread_share.h), through CliEnv::processes.
#ifndef KIMI_PLAN_CLI_LOCAL_RANKS_H_
#define KIMI_PLAN_CLI_LOCAL_RANKS_H_

#include <functional>
#include <string>
#include <vector>

#include "cli/options.h"
#include "common/status.h"

namespace kp {

/// The environment variable that tells a rank the launcher's pid.
inline constexpr const char* kLauncherPidVariable = "KIMI_PLAN_LAUNCHER_PID";
/// Local ranks one machine may start: 4 per core, and 8 on any machine.
inline constexpr int kLocalRanksPerCore = 4;
inline constexpr int kMinLocalRanks = 8;

/// Refuses, before anything starts, more ranks than this machine can hold:
/// more than kLocalRanksPerCore per core (at least kMinLocalRanks), or more
/// than MemAvailable at this process's resident size each (the runtime's
/// fixed cost before any model). InvalidArgument naming `flag`, the flag
/// that set the count (--nproc, --rollout-ranks).
Status CheckLocalRankCapacity(int nproc, const std::string& flag, const CliEnv& env);

/// Runs `kimi-plan COMMAND ARGS` (without --nproc) as `nproc` ranks in a
/// process group of their own and waits for all of them. The first rank to
/// fail has the others stopped (SIGTERM) and is named in the error:
/// InvalidArgument when it exited with 2 (bad input), IoError otherwise.
/// SIGINT, SIGTERM or SIGHUP to the launcher stops every rank (SIGTERM; a
/// second signal, SIGKILL) and returns IoError "stopped by SIGTERM ...".
/// Either way the rendezvous file is removed, and a run that rank 0 left
/// "running" in the store `db` (empty: none) is marked failed with the reason.
Status LaunchLocalRanks(const std::string& command, const std::vector<std::string>& args, int nproc,
                        const std::string& db, CliEnv& env);

/// In a rank the local launcher started (kLauncherPidVariable set; nothing
/// otherwise): asks the kernel for SIGTERM when the launcher dies, even by
/// SIGKILL, and on SIGTERM removes the rendezvous file before ending. For
/// `main`, before any thread starts.
void PrepareLocalRank(const std::function<const char*(const char*)>& getenv);

}  // namespace kp

#endif  // KIMI_PLAN_CLI_LOCAL_RANKS_H_
