// Progress and diagnostics of the commands: one spdlog logger per CLI
// invocation, made by RunCli from --log-level (a flag of every command) and
// written to CliEnv::err, so tests read it like stderr. A rank of a
// multi-process run (RANK set, WORLD_SIZE > 1) tags each line "[rank N] ",
// since its ranks share one terminal. The commands' results (tables, JSON)
// go to CliEnv::out, never through the logger.
#ifndef KIMI_PLAN_CLI_LOG_H_
#define KIMI_PLAN_CLI_LOG_H_

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "common/status.h"

namespace kp {

/// The levels --log-level takes, most verbose first; "info" is the default
/// and "warn" keeps only warnings and errors (no progress).
const std::vector<std::string>& LogLevels();

/// Removes every "--log-level X" / "--log-level=X" before a "--" from
/// `args` and returns the last X, "info" when there is none; InvalidArgument
/// naming --log-level and the allowed levels for another value.
Result<std::string> TakeLogLevel(std::vector<std::string>& args);

/// A logger at `level` (one of LogLevels()) writing whole lines to `err`,
/// flushed at once, each prefixed with `tag` (may be empty).
std::shared_ptr<spdlog::logger> MakeLogger(std::ostream& err, const std::string& level, const std::string& tag);

/// The tag of this process's lines: "[rank N] " under a torchrun-style
/// environment of more than one rank, else "".
std::string RankTag(const CliEnv& env);

/// A progress line at info level (to env.err when env.log is unset).
void Progress(const CliEnv& env, const std::string& line);

}  // namespace kp

#endif  // KIMI_PLAN_CLI_LOG_H_
