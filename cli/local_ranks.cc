// The local launcher of the multi-process commands (`run`, `sdpo`).
#include "cli/local_ranks.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "runtime/comm/rendezvous.h"

namespace kp {

namespace {

// A port nobody listens on now, from the kernel (bound to 127.0.0.1 and
// released at once); the ranks' MASTER_PORT.
int FreeLocalPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 29500;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

// The ranks' arguments: ours without --nproc.
std::vector<std::string> RankArgs(const std::string& command, const std::vector<std::string>& args) {
  std::vector<std::string> out = {command};
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--nproc") {
      ++i;
      continue;
    }
    if (args[i].rfind("--nproc=", 0) == 0) continue;
    out.push_back(args[i]);
  }
  return out;
}

std::string HowItEnded(int code) {
  if (code > 128) {
    const char* name = sigabbrev_np(code - 128);
    return "was killed by signal " + std::to_string(code - 128) + (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "exited with code " + std::to_string(code);
}

}  // namespace

Status LaunchLocalRanks(const std::string& command, const std::vector<std::string>& args, int nproc, CliEnv& env) {
  if (env.processes == nullptr) return Status::Internal(command + ": no process launcher");
  const std::string store_file = env.fs.TempPath("kimi-plan-" + command + "-" + std::to_string(getpid()) + ".store");
  KP_RETURN_IF_ERROR(env.fs.Remove(store_file));
  const int port = FreeLocalPort();
  std::vector<std::string> argv = RankArgs(command, args);
  argv.insert(argv.begin(), {env.program, "--log-level", env.log_level});
  std::vector<int> ids;
  Status failure;
  for (int r = 0; r < nproc && failure.ok(); ++r) {
    Result<int> id = env.processes->Start(
        argv, {"RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(nproc), "LOCAL_RANK=" + std::to_string(r),
               "LOCAL_WORLD_SIZE=" + std::to_string(nproc), "MASTER_ADDR=127.0.0.1",
               "MASTER_PORT=" + std::to_string(port), std::string(runtime::kStoreFileVariable) + "=" + store_file});
    if (id.ok()) ids.push_back(*id);
    else failure = id.status();
  }
  int first_failed = -1, first_code = 0;
  for (std::size_t done = 0; done < ids.size(); ++done) {
    KP_ASSIGN_OR_RETURN(const auto ended, env.processes->WaitAny());
    int rank = 0;
    while (rank < static_cast<int>(ids.size()) && ids[rank] != ended.first) ++rank;
    if (ended.second == 0 || first_failed >= 0 || !failure.ok()) continue;
    first_failed = rank;
    first_code = ended.second;
    for (std::size_t other = 0; other < ids.size(); ++other)
      if (static_cast<int>(other) != rank) (void)env.processes->Kill(ids[other], SIGTERM);
  }
  // The ranks' verdict matters more than a scratch file left behind.
  (void)env.fs.Remove(store_file);
  if (!failure.ok()) return failure;
  if (first_failed < 0) return Status::Ok();
  const std::string what = "rank " + std::to_string(first_failed) + " of " + std::to_string(nproc) + " " +
                           HowItEnded(first_code) + "; the other ranks were stopped";
  return first_code == 2 ? Status::InvalidArgument(what) : Status::IoError(what);
}


}  // namespace kp
