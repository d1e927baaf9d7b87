#include "common/process_table.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>

namespace kp {

ProcessId RealProcessTable::Self() const {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return {host, static_cast<std::int64_t>(getpid())};
}

Liveness RealProcessTable::Check(const ProcessId& p) const {
  if (p.pid <= 0 || p.host.empty() || p.host != Self().host) return Liveness::kUnknown;
  // Signal 0 checks without sending: EPERM means it exists under another user.
  if (kill(static_cast<pid_t>(p.pid), 0) == 0 || errno == EPERM) return Liveness::kAlive;
  return errno == ESRCH ? Liveness::kGone : Liveness::kUnknown;
}

}  // namespace kp
