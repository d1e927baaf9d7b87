// Starting another program and waiting for it, behind an interface so that
// commands which launch jobs (sbatch, modal, the native runtime) are tested
// without running anything. The real implementation uses posix_spawnp.
//
// Thread-safety: RealProcessLauncher is stateless; FakeProcessLauncher
// records calls and is for one thread.
#ifndef KIMI_PLAN_COMMON_PROCESS_LAUNCHER_H_
#define KIMI_PLAN_COMMON_PROCESS_LAUNCHER_H_

#include <string>
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
};

class RealProcessLauncher : public ProcessLauncher {
 public:
  Result<int> Run(const std::vector<std::string>& argv) const override;
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

 private:
  int exit_code_;
  Status start_failure_;
  // Mutable: recording through the const interface is the point of a fake.
  mutable std::vector<std::vector<std::string>> calls_;
};

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_PROCESS_LAUNCHER_H_
