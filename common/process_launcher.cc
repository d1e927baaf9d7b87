#include "common/process_launcher.h"

#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace kp {

Result<int> RealProcessLauncher::Run(const std::vector<std::string>& argv) const {
  if (argv.empty()) return Status::InvalidArgument("no program to run");
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  // posix_spawnp reports a missing program as its own error (glibc uses
  // vfork semantics), so the caller learns it could not start rather than
  // seeing a child exit with 127.
  const int rc = posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ);
  if (rc != 0) return Status::IoError(argv[0] + ": cannot start: " + std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Status::IoError(argv[0] + ": waiting for it failed: " + std::strerror(errno));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return Status::Internal(argv[0] + ": ended neither by exit nor by a signal");
}

Result<int> FakeProcessLauncher::Run(const std::vector<std::string>& argv) const {
  calls_.push_back(argv);
  if (argv.empty()) return Status::InvalidArgument("no program to run");
  if (!start_failure_.ok()) return start_failure_;
  return exit_code_;
}

}  // namespace kp
