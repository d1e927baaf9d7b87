// Where a rank of the distributed runtime is and how it meets the others: the
// torchrun-style environment (docs/launcher.md) read into plain data. No
// LibTorch here: the CLI includes it.
#ifndef KIMI_PLAN_RUNTIME_COMM_RENDEZVOUS_H_
#define KIMI_PLAN_RUNTIME_COMM_RENDEZVOUS_H_

#include <functional>
#include <string>

#include "common/status.h"

namespace kp::runtime {

/// One rank's view of the job. Rank 0 hosts a c10d TCPStore at
/// master_addr:master_port that every rank connects to; when `store_file`
/// is set the ranks meet through a c10d FileStore at that path instead (one
/// host only: the local launcher and the tests, which open no listening
/// socket beyond Gloo's loopback pairs).
struct Rendezvous {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string store_file;
};

/// How the ranks talk once they have met (runtime/comm/c10d_communicator.h).
struct C10dOptions {
  /// "gloo", "nccl", or "auto": NCCL when `device` is CUDA, Gloo otherwise.
  std::string backend = "auto";
  /// "cpu" or "cuda[:N]"; NCCL needs CUDA tensors, Gloo takes CPU tensors.
  std::string device = "cpu";
  /// How long any call (and the rendezvous) waits before failing.
  int timeout_s = 120;
  /// The network interface Gloo binds to when the master is not a loopback
  /// address (GLOO_SOCKET_IFNAME, which `main` reads); empty: the address
  /// the host name resolves to.
  std::string gloo_interface;
};

/// The environment variable that names a FileStore for the rendezvous.
inline constexpr const char* kStoreFileVariable = "KIMI_PLAN_STORE_FILE";

/// Reads RANK, WORLD_SIZE (both required), LOCAL_RANK (default RANK),
/// LOCAL_WORLD_SIZE (default WORLD_SIZE), MASTER_ADDR (default 127.0.0.1),
/// MASTER_PORT (default 29500) and KIMI_PLAN_STORE_FILE through `getenv`
/// (null for unset). InvalidArgument naming the variable for a missing or
/// malformed value, a rank outside [0, WORLD_SIZE), or a MASTER_ADDR that
/// does not resolve (ResolveMasterAddress).
Result<Rendezvous> RendezvousFromEnvironment(const std::function<const char*(const char*)>& getenv);

/// Ok when `address` resolves (getaddrinfo: a literal address or a name the
/// resolver knows); else InvalidArgument "MASTER_ADDR: "NAME" does not
/// resolve to an address (Name or service not known)".
Status ResolveMasterAddress(const std::string& address);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_COMM_RENDEZVOUS_H_
