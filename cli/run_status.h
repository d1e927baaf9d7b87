// A run's row from start to end: the process that records it (so that
// `report` can tell a killed run from one still going) and how it ended.
#ifndef KIMI_PLAN_CLI_RUN_STATUS_H_
#define KIMI_PLAN_CLI_RUN_STATUS_H_

#include <cstdint>

#include "cli/cli.h"
#include "common/status.h"
#include "store/store.h"

namespace kp {

/// Sets run.host and run.pid to this process (env.process_table), or leaves
/// them empty without one.
void NameRecordingProcess(const CliEnv& env, RunRecord* run);

/// Records that run `id` finished (`outcome` ok) or failed with `outcome`'s
/// message, and returns `outcome`; when recording the end fails, that
/// failure (for an ok outcome) or the outcome itself (else) is returned.
Status EndRunWith(Store& store, std::int64_t id, Status outcome);

}  // namespace kp

#endif  // KIMI_PLAN_CLI_RUN_STATUS_H_
