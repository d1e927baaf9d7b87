// Starting another program and waiting for it, behind an interface so that
// commands which launch jobs (sbatch, modal, the native runtime) are tested
// without running anything. The real implementation uses posix_spawnp.
//
// Thread-safety: RealProcessLauncher is stateless; FakeProcessLauncher
// records calls and is for one thread.
#ifndef KIMI_PLAN_COMMON_PROCESS_LAUNCHER_H_
#define KIMI_PLAN_COMMON_PROCESS_LAUNCHER_H_

#include <csignal>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kp {

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  /// Runs `argv` (argv[0] searched on PATH unless it holds a '/') with this
  /// process's environment, stdin, stdout and stderr; waits for it and
  /// returns its exit code, or 128 + the signal number when a signal ended
  /// it. IoError naming argv[0] when it cannot be started; InvalidArgument
  /// for an empty argv.
  virtual Result<int> Run(const std::vector<std::string>& argv) const = 0;

  /// Starts `argv` like Run, with `env` ("NAME=VALUE" entries, replacing
  /// this process's NAME) added to the environment, and returns at once with
  /// the child's id (for WaitAny and Kill). `process_group`: -1 keeps this
  /// process's group; 0 makes the child lead a new group (its id is the
  /// group's); a positive id joins that group, so that KillGroup reaches
  /// every child of one launch and a terminal's Ctrl-C reaches only this
  /// process. IoError when it cannot start. The default says the launcher
  /// cannot start children concurrently.
  virtual Result<int> Start(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                            int process_group = -1) const;
  /// Blocks until any child started by Start ends; returns {id, code}, code
  /// as Run's (exit code, or 128 + signal). With `stop`, returns {0, *stop}
  /// as soon as *stop is non-zero (a signal handler sets it) instead of
  /// waiting on. IoError when none is running.
  virtual Result<std::pair<int, int>> WaitAny(const volatile std::sig_atomic_t* stop = nullptr) const;
  /// Sends `signal` to a started child that has not been waited for.
  virtual Status Kill(int id, int signal) const;
  /// Sends `signal` to every process of the group `group` (a child started
  /// with process_group 0 leads it).
  virtual Status KillGroup(int group, int signal) const;
};

class RealProcessLauncher : public ProcessLauncher {
 public:
  Result<int> Run(const std::vector<std::string>& argv) const override;
  Result<int> Start(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                    int process_group = -1) const override;
  Result<std::pair<int, int>> WaitAny(const volatile std::sig_atomic_t* stop = nullptr) const override;
  Status Kill(int id, int signal) const override;
  Status KillGroup(int group, int signal) const override;
};

/// Records every command and answers with a fixed exit code, or with a
/// start failure when one is set.
class FakeProcessLauncher : public ProcessLauncher {
 public:
  explicit FakeProcessLauncher(int exit_code = 0) : exit_code_(exit_code) {}
  void SetExitCode(int code) { exit_code_ = code; }
  /// Makes every Run fail to start with `status` (non-ok).
  void SetStartFailure(Status status) { start_failure_ = std::move(status); }
  Result<int> Run(const std::vector<std::string>& argv) const override;
  const std::vector<std::vector<std::string>>& calls() const { return calls_; }

  /// Start records argv (in calls()) and env (in envs()) and returns ids
  /// 1, 2, ...; WaitAny reports the children in start order, each with its
  /// SetChildExit code or else the fixed exit code; Kill is recorded.
  Result<int> Start(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                    int process_group = -1) const override;
  Result<std::pair<int, int>> WaitAny(const volatile std::sig_atomic_t* stop = nullptr) const override;
  Status Kill(int id, int signal) const override;
  /// Recorded in kills() as {-group, signal}.
  Status KillGroup(int group, int signal) const override;
  void SetChildExit(int id, int code) { child_exit_[id] = code; }
  const std::vector<std::vector<std::string>>& envs() const { return envs_; }
  /// The process_group each Start was given.
  const std::vector<int>& groups() const { return groups_; }
  /// {id, signal} of every Kill.
  const std::vector<std::pair<int, int>>& kills() const { return kills_; }

 private:
  int exit_code_;
  Status start_failure_;
  std::map<int, int> child_exit_;
  // Mutable: recording through the const interface is the point of a fake.
  mutable std::vector<std::vector<std::string>> calls_;
  mutable std::vector<std::vector<std::string>> envs_;
  mutable std::vector<int> groups_;
  mutable std::vector<std::pair<int, int>> kills_;
  mutable int started_ = 0, waited_ = 0;
};

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_PROCESS_LAUNCHER_H_
