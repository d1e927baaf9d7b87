#include "runtime/comm/rendezvous.h"

#include <netdb.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>

#include "common/text.h"

namespace kp::runtime {

namespace {

Result<int> IntVariable(const std::function<const char*(const char*)>& getenv, const char* name, int fallback,
                        bool required) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') {
    if (required) return Status::InvalidArgument(std::string(name) + ": not set (the torchrun-style environment)");
    return fallback;
  }
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || n < 0 || n > 1 << 20)
    return Status::InvalidArgument(std::string(name) + ": must be a non-negative integer, got \"" + v + "\"");
  return static_cast<int>(n);
}

}  // namespace

Result<Rendezvous> RendezvousFromEnvironment(const std::function<const char*(const char*)>& getenv) {
  Rendezvous r;
  KP_ASSIGN_OR_RETURN(r.rank, IntVariable(getenv, "RANK", 0, true));
  KP_ASSIGN_OR_RETURN(r.world_size, IntVariable(getenv, "WORLD_SIZE", 1, true));
  if (r.world_size < 1) return Status::InvalidArgument("WORLD_SIZE: must be at least 1");
  if (r.rank >= r.world_size)
    return Status::InvalidArgument("RANK: " + std::to_string(r.rank) + " is outside WORLD_SIZE " +
                                   std::to_string(r.world_size));
  KP_ASSIGN_OR_RETURN(r.local_rank, IntVariable(getenv, "LOCAL_RANK", r.rank, false));
  KP_ASSIGN_OR_RETURN(r.local_world_size, IntVariable(getenv, "LOCAL_WORLD_SIZE", r.world_size, false));
  KP_ASSIGN_OR_RETURN(r.master_port, IntVariable(getenv, "MASTER_PORT", 29500, false));
  if (r.master_port < 1 || r.master_port > 65535)
    return Status::InvalidArgument("MASTER_PORT: must be a TCP port, got " + std::to_string(r.master_port));
  if (const char* addr = getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') r.master_addr = addr;
  if (const char* file = getenv(kStoreFileVariable); file != nullptr) r.store_file = file;
  // A name that does not resolve would only fail after c10d's timeout, one
  // warning a second; it is refused here, at once.
  KP_RETURN_IF_ERROR(ResolveMasterAddress(r.master_addr));
  return r;
}

Status ResolveMasterAddress(const std::string& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(address.c_str(), nullptr, &hints, &found);
  if (found) ::freeaddrinfo(found);
  if (rc == 0) return Status::Ok();
  return Status::InvalidArgument("MASTER_ADDR: \"" + QuoteBounded(address) + "\" does not resolve to an address (" +
                                 ::gai_strerror(rc) + ")");
}

}  // namespace kp::runtime
