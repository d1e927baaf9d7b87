#include "cli/log.h"

#include <algorithm>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

namespace kp {

const std::vector<std::string>& LogLevels() {
  static const std::vector<std::string> kLevels = {"trace", "debug", "info", "warn", "error", "off"};
  return kLevels;
}

namespace {

// "trace, debug, info, warn, error or off".
std::string AllowedLevels() {
  const std::vector<std::string>& all = LogLevels();
  std::string out;
  for (std::size_t i = 0; i < all.size(); ++i) out += (i == 0 ? "" : i + 1 == all.size() ? " or " : ", ") + all[i];
  return out;
}

}  // namespace

Result<std::string> TakeLogLevel(std::vector<std::string>& args) {
  std::string level = "info";
  std::vector<std::string> rest;
  bool after_dashes = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") after_dashes = true;
    if (after_dashes || a.rfind("--log-level", 0) != 0) {
      rest.push_back(a);
      continue;
    }
    if (a == "--log-level") {
      if (i + 1 == args.size()) return Status::InvalidArgument("--log-level: needs a level: " + AllowedLevels());
      level = args[++i];
    } else if (a.rfind("--log-level=", 0) == 0) {
      level = a.substr(12);
    } else {
      rest.push_back(a);
      continue;
    }
    const std::vector<std::string>& all = LogLevels();
    if (std::find(all.begin(), all.end(), level) == all.end())
      return Status::InvalidArgument("--log-level: must be " + AllowedLevels() + ", got \"" + level + "\"");
  }
  args = std::move(rest);
  return level;
}

std::shared_ptr<spdlog::logger> MakeLogger(std::ostream& err, const std::string& level, const std::string& tag) {
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(err, /*force_flush=*/true);
  auto logger = std::make_shared<spdlog::logger>("kimi-plan", std::move(sink));
  // The tag is text, not a pattern: escape spdlog's flag character.
  std::string escaped;
  for (char c : tag) escaped += c == '%' ? std::string("%%") : std::string(1, c);
  logger->set_pattern(escaped + "%v");
  logger->set_level(spdlog::level::from_str(level));
  return logger;
}

std::string RankTag(const CliEnv& env) {
  const char* rank = env.getenv("RANK");
  const char* world = env.getenv("WORLD_SIZE");
  if (rank == nullptr || *rank == '\0' || world == nullptr || std::atoi(world) <= 1) return "";
  return "[rank " + std::string(rank) + "] ";
}

void Progress(const CliEnv& env, const std::string& line) {
  if (env.log) env.log->info(line);
  else env.err << line << "\n";
}

}  // namespace kp
