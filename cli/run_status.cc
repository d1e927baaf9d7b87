#include "cli/run_status.h"

#include <utility>

namespace kp {

void NameRecordingProcess(const CliEnv& env, RunRecord* run) {
  if (!env.process_table) return;
  const ProcessId self = env.process_table->Self();
  run->host = self.host;
  run->pid = self.pid;
}

Status EndRunWith(Store& store, std::int64_t id, Status outcome) {
  const Status recorded = store.EndRun(id, outcome);
  // The run's own error is what the user needs to see first.
  if (!outcome.ok()) return outcome;
  return recorded;
}

}  // namespace kp
