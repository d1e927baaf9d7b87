#include "cli/output_paths.h"

#include <string>

namespace kp {

Status CheckOutputFile(const po::variables_map& vm, const CliEnv& env, const char* flag, bool create_parent) {
  if (!vm.count(flag)) return Status::Ok();
  return env.fs.CheckWritableFile(vm[flag].as<std::string>(), create_parent).WithContext(std::string("--") + flag);
}

Status CheckOutputDirectory(const po::variables_map& vm, const CliEnv& env, const char* flag) {
  if (!vm.count(flag)) return Status::Ok();
  return env.fs.CheckWritableDirectory(vm[flag].as<std::string>()).WithContext(std::string("--") + flag);
}

}  // namespace kp
