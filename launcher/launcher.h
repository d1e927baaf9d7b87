// A launch as data: the files to write and the command that starts the
// job. `kimi-plan launch` writes the files through the FileSystem and runs
// the command through the ProcessLauncher; this library touches neither.
#ifndef KIMI_PLAN_LAUNCHER_LAUNCHER_H_
#define KIMI_PLAN_LAUNCHER_LAUNCHER_H_

#include <string>
#include <vector>

#include "launcher/launch_spec.h"
#include "launcher/verl_overrides.h"

namespace kp {

struct JobFile {
  std::string path;
  std::string contents;
};

struct LaunchArtifacts {
  std::vector<JobFile> files;              ///< empty for the local target
  std::vector<std::string> start_command;  ///< sbatch FILE | modal run --detach FILE | PROGRAM run --nproc N ...
};

/// Checks the launch (CheckLaunch) and builds its artifacts: for Slurm the
/// sbatch script under `out_dir` and `sbatch FILE`; for Modal the app file
/// and `modal run --detach FILE`; for local no file and the native
/// runtime's command line starting all the plan's ranks here, with
/// `program` (this kimi-plan) as the executable. `keys` matters only for
/// the Verl engine.
Result<LaunchArtifacts> BuildLaunch(const Launch& l, const VerlKeys& keys, const std::string& out_dir,
                                    const std::string& program);

/// `label` with every character other than letters, digits, '-', '_' and
/// '.' replaced by '-', so it can name a job, an app and a directory.
std::string JobLabel(const std::string& label);

}  // namespace kp

#endif  // KIMI_PLAN_LAUNCHER_LAUNCHER_H_
