#include "cli/program.h"

#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "specs/presets.h"

namespace kp {

CliEnv RealCliEnv(RealServices& s, const char* argv0) {
  CliEnv env{std::cout, std::cerr, s.fs, s.clock, DefaultPresetDir(), &s.processes, ProgramPath(argv0)};
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
  std::error_code ec;
  // The real file, not argv[0]: a symlink on PATH still finds its sibling.
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const std::filesystem::path sibling = self.parent_path() / name;
  if (::access(sibling.c_str(), X_OK) != 0) return "";
  return sibling.string();
}

}  // namespace kp
