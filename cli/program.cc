#include "cli/program.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "common/data_paths.h"

#ifndef KIMI_PLAN_SOURCE_ROOT
#define KIMI_PLAN_SOURCE_ROOT "."
#endif

namespace kp {

namespace {
// This executable's real file (a symlink on PATH resolved), or "" where
// /proc has none.
std::filesystem::path SelfExecutable() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : self;
}
}  // namespace

CliEnv RealCliEnv(RealServices& s, const char* argv0) {
  CliEnv env{std::cout, std::cerr, s.fs, s.clock, FindDataPaths(s.fs, SelfExecutable().string(), KIMI_PLAN_SOURCE_ROOT),
             &s.processes, ProgramPath(argv0)};
  // KIMI_PLAN_PRESETS points the catalogue elsewhere (main is where the
  // environment is read).
  if (const char* presets = std::getenv("KIMI_PLAN_PRESETS"); presets != nullptr && *presets != '\0')
    env.data.presets = presets;
  env.process_table = &s.process_table;
  return env;
}

std::string ProgramPath(const char* argv0) {
  const std::string name = argv0;
  if (name.find('/') == std::string::npos) return name;
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(name, ec);
  return ec ? name : abs.lexically_normal().string();
}

std::string SiblingExecutable(const std::string& name) {
  // The real file, not argv[0]: a symlink on PATH still finds its sibling.
  const std::filesystem::path self = SelfExecutable();
  if (self.empty()) return "";
  const std::filesystem::path sibling = self.parent_path() / name;
  if (::access(sibling.c_str(), X_OK) != 0) return "";
  return sibling.string();
}

}  // namespace kp
