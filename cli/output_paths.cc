#include "cli/output_paths.h"

#include <string>
#include <utility>
#include <vector>

namespace kp {

Status CheckOutputFile(const po::variables_map& vm, const CliEnv& env, const char* flag, bool create_parent) {
  if (!vm.count(flag)) return Status::Ok();
  return env.fs.CheckWritableFile(vm[flag].as<std::string>(), create_parent).WithContext(std::string("--") + flag);
}

Status CheckOutputDirectory(const po::variables_map& vm, const CliEnv& env, const char* flag) {
  if (!vm.count(flag)) return Status::Ok();
  return env.fs.CheckWritableDirectory(vm[flag].as<std::string>()).WithContext(std::string("--") + flag);
}

Status CheckDistinctPaths(const po::variables_map& vm, const CliEnv& env, std::initializer_list<const char*> flags) {
  std::vector<std::pair<const char*, std::string>> seen;
  for (const char* flag : flags) {
    if (!vm.count(flag)) continue;
    const std::string path = vm[flag].as<std::string>();
    const std::string canonical = env.fs.Canonical(path);
    for (const auto& [other, other_canonical] : seen)
      if (canonical == other_canonical)
        return Status::InvalidArgument(std::string("--") + flag + ": " + path + " is also --" + other +
                                       "'s path; give each its own file");
    seen.emplace_back(flag, canonical);
  }
  return Status::Ok();
}

}  // namespace kp
