#include "common/process_launcher.h"

#include <spawn.h>
#include <sys/wait.h>

#include <signal.h>

#include <cerrno>
#include <cstring>
#include <ctime>

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

namespace {

// Run's code for a wait status.
Result<int> ExitCode(const std::string& name, int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return Status::Internal(name + ": ended neither by exit nor by a signal");
}

// This process's environment with `extra` replacing the same names.
std::vector<std::string> MergedEnvironment(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('=') + 1);
    bool replaced = false;
    for (const std::string& x : extra) replaced = replaced || x.rfind(name, 0) == 0;
    if (!replaced) env.push_back(entry);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

}  // namespace

Result<int> ProcessLauncher::Start(const std::vector<std::string>& argv, const std::vector<std::string>&,
                                   int) const {
  return Status::Internal((argv.empty() ? std::string("a program") : argv[0]) +
                          ": this launcher cannot start processes concurrently");
}

Result<std::pair<int, int>> ProcessLauncher::WaitAny(const volatile std::sig_atomic_t*) const {
  return Status::Internal("this launcher starts no concurrent processes");
}

Status ProcessLauncher::Kill(int, int) const {
  return Status::Internal("this launcher starts no concurrent processes");
}

Status ProcessLauncher::KillGroup(int, int) const {
  return Status::Internal("this launcher starts no concurrent processes");
}

Result<int> RealProcessLauncher::Start(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                       int process_group) const {
  if (argv.empty()) return Status::InvalidArgument("no program to run");
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const std::vector<std::string> merged = MergedEnvironment(env);
  for (const std::string& e : merged) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  if (process_group >= 0) {
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, process_group);
  }
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], nullptr, &attr, args.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Status::IoError(argv[0] + ": cannot start: " + std::strerror(rc));
  return static_cast<int>(pid);
}

Status RealProcessLauncher::KillGroup(int group, int signal) const {
  if (group <= 0) return Status::Internal("kill: not a process group: " + std::to_string(group));
  if (::kill(-static_cast<pid_t>(group), signal) != 0 && errno != ESRCH)
    return Status::IoError("kill -" + std::to_string(group) + ": " + std::strerror(errno));
  return Status::Ok();
}

Result<std::pair<int, int>> RealProcessLauncher::WaitAny(const volatile std::sig_atomic_t* stop) const {
  int status = 0;
  pid_t pid;
  // With a stop flag, poll every 20 ms: a signal that arrives just before a
  // blocking waitpid would otherwise go unseen until a child ends.
  const int options = stop ? WNOHANG : 0;
  while ((pid = waitpid(-1, &status, options)) <= 0) {
    if (pid < 0 && errno != EINTR)
      return Status::IoError(std::string("waiting for a child failed: ") + std::strerror(errno));
    if (stop && *stop) return std::make_pair(0, static_cast<int>(*stop));
    if (pid == 0) {
      const timespec pause{0, 20'000'000};
      nanosleep(&pause, nullptr);
    }
  }
  KP_ASSIGN_OR_RETURN(const int code, ExitCode("process " + std::to_string(pid), status));
  return std::make_pair(static_cast<int>(pid), code);
}

Status RealProcessLauncher::Kill(int id, int signal) const {
  if (id <= 0) return Status::Internal("kill: not a child id: " + std::to_string(id));
  if (::kill(static_cast<pid_t>(id), signal) != 0 && errno != ESRCH)
    return Status::IoError("kill " + std::to_string(id) + ": " + std::strerror(errno));
  return Status::Ok();
}

Result<int> FakeProcessLauncher::Start(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                       int process_group) const {
  calls_.push_back(argv);
  envs_.push_back(env);
  groups_.push_back(process_group);
  if (argv.empty()) return Status::InvalidArgument("no program to run");
  if (!start_failure_.ok()) return start_failure_;
  return ++started_;
}

Result<std::pair<int, int>> FakeProcessLauncher::WaitAny(const volatile std::sig_atomic_t* stop) const {
  if (stop && *stop) return std::make_pair(0, static_cast<int>(*stop));
  if (waited_ >= started_) return Status::IoError("waiting for a child failed: no child processes");
  const int id = ++waited_;
  const auto it = child_exit_.find(id);
  return std::make_pair(id, it == child_exit_.end() ? exit_code_ : it->second);
}

Status FakeProcessLauncher::Kill(int id, int signal) const {
  kills_.emplace_back(id, signal);
  return Status::Ok();
}

Status FakeProcessLauncher::KillGroup(int group, int signal) const {
  kills_.emplace_back(-group, signal);
  return Status::Ok();
}

Result<int> FakeProcessLauncher::Run(const std::vector<std::string>& argv) const {
  calls_.push_back(argv);
  if (argv.empty()) return Status::InvalidArgument("no program to run");
  if (!start_failure_.ok()) return start_failure_;
  return exit_code_;
}

}  // namespace kp
