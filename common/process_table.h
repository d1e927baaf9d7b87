// Which process this is, and whether a recorded one still runs, behind an
// interface: a run's row in the store names the process that writes it, so
// that `report` can tell a run still going from one that was killed
// without a word (docs/schema.md, runs.status).
//
// Thread-safety: RealProcessTable is stateless; FakeProcessTable is for one
// thread.
#ifndef KIMI_PLAN_COMMON_PROCESS_TABLE_H_
#define KIMI_PLAN_COMMON_PROCESS_TABLE_H_

#include <cstdint>
#include <set>
#include <string>

namespace kp {

struct ProcessId {
  std::string host;
  std::int64_t pid = 0;
};

enum class Liveness { kAlive, kGone, kUnknown };

class ProcessTable {
 public:
  virtual ~ProcessTable() = default;
  /// This process: the host name and its process id.
  virtual ProcessId Self() const = 0;
  /// Whether `p` still runs: kUnknown for a process of another host (or
  /// no pid), where this machine cannot look. A pid the system has since
  /// given to another process reads as alive.
  virtual Liveness Check(const ProcessId& p) const = 0;
};

/// gethostname, getpid, and kill(pid, 0).
class RealProcessTable : public ProcessTable {
 public:
  ProcessId Self() const override;
  Liveness Check(const ProcessId& p) const override;
};

/// A host "fake-host" whose live pids are set by the test.
class FakeProcessTable : public ProcessTable {
 public:
  explicit FakeProcessTable(std::int64_t self_pid = 100) : self_pid_(self_pid) { alive_.insert(self_pid); }
  void SetAlive(std::int64_t pid, bool alive) {
    if (alive) alive_.insert(pid);
    else alive_.erase(pid);
  }
  ProcessId Self() const override { return {"fake-host", self_pid_}; }
  Liveness Check(const ProcessId& p) const override {
    if (p.host != "fake-host" || p.pid <= 0) return Liveness::kUnknown;
    return alive_.count(p.pid) ? Liveness::kAlive : Liveness::kGone;
  }

 private:
  std::int64_t self_pid_;
  std::set<std::int64_t> alive_;
};

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_PROCESS_TABLE_H_
