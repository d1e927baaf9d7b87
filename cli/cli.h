// The command line: git-style subcommands over the libraries. Everything the
// commands touch outside memory comes through CliEnv, so tests run them
// in-process against fakes. Only main() turns the returned code into an exit.
#ifndef KIMI_PLAN_CLI_CLI_H_
#define KIMI_PLAN_CLI_CLI_H_

#include <cstdlib>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/data_paths.h"
#include "common/file_system.h"
#include "common/process_launcher.h"
#include "common/process_table.h"
#include "common/status.h"

namespace spdlog {
class logger;
}  // namespace spdlog

namespace kp {

struct CliEnv {
  std::ostream& out;
  std::ostream& err;
  const FileSystem& fs;
  const Clock& clock;
  /// The presets, the Verl key list and the validation cases (main finds
  /// them beside the executable: common/data_paths.h).
  DataPaths data;
  /// Starts other programs (sbatch, modal, the native runtime); a command
  /// that needs one fails with an internal error when it is missing.
  const ProcessLauncher* processes = nullptr;
  /// How this executable was invoked (argv[0]), so that it can start itself.
  std::string program = "kimi-plan";
  /// Reads an environment variable (null when unset): `run` learns its rank
  /// from the torchrun-style environment; tests substitute a map.
  std::function<const char*(const char*)> getenv = [](const char* name) { return std::getenv(name); };
  /// Sets an environment variable of this process unless it is set (main's
  /// real one; by default nothing is set): a deterministic run on CUDA needs
  /// cuBLAS's workspace fixed before LibTorch's first product.
  std::function<void(const char* name, const char* value)> setenv = [](const char*, const char*) {};
  /// Names this process in the runs it records (train, run, sdpo) and tells
  /// `report` whether a run still marked running has lost its process; null:
  /// runs record no process and every running run reads as running.
  const ProcessTable* process_table = nullptr;
  /// Progress and diagnostics (cli/log.h); RunCli makes it on `err` from
  /// --log-level, which it also keeps here for the ranks it starts.
  std::shared_ptr<spdlog::logger> log = nullptr;
  std::string log_level = "info";
  /// kimi-plan-runtime, the executable holding the commands that train
  /// (train, run, sdpo, calibrate), when it is installed beside this one;
  /// empty when it is not.
  std::string runtime_program{};
  /// Replaces this process by `program args...` (main's execv): returns
  /// only when it could not, with the reason. Null: nothing can be started.
  std::function<Status(const std::string& program, const std::vector<std::string>& args)> exec{};
};

/// The file name of the executable that links LibTorch.
inline constexpr const char* kRuntimeProgram = "kimi-plan-runtime";

/// Runs `kimi-plan args...` (args excludes the program name) and returns the
/// exit code: 0 success, 2 bad input (one line on err naming the field),
/// 1 an I/O or internal failure. The commands that train are handed to
/// env.runtime_program through env.exec; without it they are refused with
/// exit 2 (calibrate refuses after checking its flags, as before).
int RunCli(const std::vector<std::string>& args, CliEnv& env);

/// Runs `kimi-plan-runtime args...`: the commands that train (train, run,
/// sdpo, calibrate), with the same exit codes. Defined only in a build with
/// LibTorch (kp_cli_runtime).
int RunRuntimeCli(const std::vector<std::string>& args, CliEnv& env);

}  // namespace kp

#endif  // KIMI_PLAN_CLI_CLI_H_
