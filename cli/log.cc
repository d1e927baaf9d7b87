#include "cli/log.h"

#include <algorithm>
#include <mutex>
#include <string_view>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include "common/text.h"

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

// Every log line reaches the terminal as one bounded line with its control
// bytes escaped, so a name read from a file cannot move the cursor, recolour
// the terminal or fake a line of its own.
class OneLineSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit OneLineSink(std::ostream& out) : out_(out) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    std::string_view line(formatted.data(), formatted.size());
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
    out_ << OneLine(line) << '\n';
    out_.flush();
  }
  void flush_() override { out_.flush(); }

 private:
  std::ostream& out_;
};

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
      return Status::InvalidArgument("--log-level: must be " + AllowedLevels() + ", got \"" + QuoteBounded(level) + "\"");
  }
  args = std::move(rest);
  return level;
}

std::shared_ptr<spdlog::logger> MakeLogger(std::ostream& err, const std::string& level, const std::string& tag) {
  auto sink = std::make_shared<OneLineSink>(err);
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
