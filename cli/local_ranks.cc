// The local launcher of the multi-process commands (`run`, `sdpo`).
//
// The ranks live exactly as long as their launcher: they run in a process
// group of their own (led by rank 0), which the launcher stops with SIGTERM
// when it is told to stop (SIGINT, SIGTERM, SIGHUP) or when a rank fails;
// and each rank asks the kernel for SIGTERM when the launcher dies, even by
// SIGKILL (PrepareLocalRank), removing the rendezvous file on its way out.
#include "cli/local_ranks.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <csignal>
#include <cstring>
#include <thread>

#include "common/proc_file.h"
#include "common/stop_signals.h"
#include "common/table.h"
#include "common/thread_share.h"
#include "runtime/comm/rendezvous.h"
#include "store/store.h"

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

std::string SignalName(int signal) {
  const char* name = sigabbrev_np(signal);
  return name ? std::string("SIG") + name : "signal " + std::to_string(signal);
}

std::string HowItEnded(int code) {
  if (code > 128) return "was killed by signal " + std::to_string(code - 128) + " (" + SignalName(code - 128) + ")";
  return "exited with code " + std::to_string(code);
}

// The rendezvous file a rank removes when its launcher dies (set once by
// PrepareLocalRank, read by the handler).
char g_rank_store_file[4096] = {0};

extern "C" void RankLauncherGone(int signal) {
  if (g_rank_store_file[0] != '\0') ::unlink(g_rank_store_file);
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

// Rank 0 records the run; when the ranks end without rank 0 ending it (a
// signal stopped them), the launcher marks it, so that it reads "failed"
// with the reason rather than a run that vanished.
void EndRunsOfRankZero(const CliEnv& env, const std::string& db, int rank0_pid, const Status& why) {
  if (db.empty() || env.process_table == nullptr || !env.fs.Exists(db)) return;
  Result<std::unique_ptr<Store>> store = Store::Open(db, env.clock);
  if (!store.ok()) return;
  (void)(*store)->EndRunsOfProcess(env.process_table->Self().host, rank0_pid, why);
}

}  // namespace

Status CheckLocalRankCapacity(int nproc, const std::string& flag, const CliEnv& env) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::int64_t most = std::max<std::int64_t>(kMinLocalRanks, std::int64_t{kLocalRanksPerCore} * cores);
  if (nproc > most)
    return Status::InvalidArgument(flag + ": " + std::to_string(nproc) + " ranks on this machine's " +
                                   std::to_string(cores) + " cores; at most " + std::to_string(most) + " (" +
                                   std::to_string(kLocalRanksPerCore) + " per core, and " +
                                   std::to_string(kMinLocalRanks) + " anywhere) start here");
  // Every rank is this executable with LibTorch loaded before it builds a
  // model: this process's resident size is each rank's fixed cost.
  const std::optional<double> resident = ProcKilobytes(env.fs, "/proc/self/status", "VmRSS");
  const std::optional<double> available = ProcKilobytes(env.fs, "/proc/meminfo", "MemAvailable");
  if (!resident || !available) return Status::Ok();
  const double need = *resident * nproc;
  if (need <= *available) return Status::Ok();
  return Status::InvalidArgument(flag + ": " + std::to_string(nproc) + " ranks need " + FormatGB(need) +
                                 " before any model (" + FormatGB(*resident) +
                                 " each, this executable's resident size), more than the " + FormatGB(*available) +
                                 " this machine has available");
}

void PrepareLocalRank(const std::function<const char*(const char*)>& getenv) {
  const char* launcher = getenv(kLauncherPidVariable);
  if (launcher == nullptr || *launcher == '\0') return;
  if (const char* file = getenv(runtime::kStoreFileVariable); file != nullptr && std::strlen(file) < sizeof g_rank_store_file)
    std::strncpy(g_rank_store_file, file, sizeof g_rank_store_file - 1);
  struct sigaction sa {};
  sa.sa_handler = RankLauncherGone;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  // The launcher may have died before the request: then the kernel will
  // send nothing, so go now.
  if (std::to_string(::getppid()) != launcher) ::raise(SIGTERM);
}

Status LaunchLocalRanks(const std::string& command, const std::vector<std::string>& args, int nproc,
                        const std::string& db, CliEnv& env) {
  if (env.processes == nullptr) return Status::Internal(command + ": no process launcher");
  const std::string store_file = env.fs.TempPath("kimi-plan-" + command + "-" + std::to_string(getpid()) + ".store");
  KP_RETURN_IF_ERROR(env.fs.Remove(store_file));
  const int port = FreeLocalPort();
  std::vector<std::string> argv = RankArgs(command, args);
  argv.insert(argv.begin(), {env.program, "--log-level", env.log_level});
  // Each rank gets its share of the cores (OMP_NUM_THREADS caps it), so that
  // the ranks' OpenMP teams do not spin against each other.
  const std::string threads = ThreadsPerLocalRankVariable(
      nproc, static_cast<int>(std::thread::hardware_concurrency()), env.getenv(kThreadsVariable));
  StopSignals signals;
  std::vector<int> ids;
  Status failure;
  for (int r = 0; r < nproc && failure.ok(); ++r) {
    Result<int> id = env.processes->Start(
        argv,
        {"RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(nproc), "LOCAL_RANK=" + std::to_string(r),
         "LOCAL_WORLD_SIZE=" + std::to_string(nproc), "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port),
         std::string(runtime::kStoreFileVariable) + "=" + store_file,
         std::string(kLauncherPidVariable) + "=" + std::to_string(getpid()), threads},
        /*process_group=*/ids.empty() ? 0 : ids.front());
    if (id.ok()) ids.push_back(*id);
    else failure = id.status();
  }
  int first_failed = -1, first_code = 0, stop_signal = 0, stops = 0;
  for (std::size_t done = 0; done < ids.size();) {
    KP_ASSIGN_OR_RETURN(const auto ended, env.processes->WaitAny(signals.flag()));
    if (ended.first == 0) {
      // Told to stop: the ranks first get SIGTERM, a second signal kills them.
      stop_signal = ended.second;
      signals.Clear();
      (void)env.processes->KillGroup(ids.front(), stops++ == 0 ? SIGTERM : SIGKILL);
      continue;
    }
    ++done;
    int rank = 0;
    while (rank < static_cast<int>(ids.size()) && ids[rank] != ended.first) ++rank;
    if (ended.second == 0 || first_failed >= 0 || !failure.ok() || stop_signal) continue;
    first_failed = rank;
    first_code = ended.second;
    for (std::size_t other = 0; other < ids.size(); ++other)
      if (static_cast<int>(other) != rank) (void)env.processes->Kill(ids[other], SIGTERM);
  }
  // The ranks' verdict matters more than a scratch file left behind.
  (void)env.fs.Remove(store_file);
  if (!failure.ok()) return failure;
  if (stop_signal) {
    const Status stopped = Status::IoError("stopped by " + SignalName(stop_signal) + ": the launcher ended its " +
                                           std::to_string(ids.size()) + " ranks");
    EndRunsOfRankZero(env, db, ids.front(), stopped);
    return stopped;
  }
  if (first_failed < 0) return Status::Ok();
  const std::string what = "rank " + std::to_string(first_failed) + " of " + std::to_string(nproc) + " " +
                           HowItEnded(first_code) + "; the other ranks were stopped";
  const Status failed = first_code == 2 ? Status::InvalidArgument(what) : Status::IoError(what);
  EndRunsOfRankZero(env, db, ids.front(), failed);
  return failed;
}

}  // namespace kp
