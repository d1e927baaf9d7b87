#include "common/data_paths.h"

#include <filesystem>

namespace kp {

// The two layouts list the same files: `cmake --install` (CMakeLists.txt,
// "install") copies each source path to its installed one.
DataPaths DataPaths::Installed(const std::string& share) {
  return {share + "/presets", share + "/verl_keys.txt",
          {share + "/validation/megatron_runs.json", share + "/validation/megatron_moe_runs.json"}};
}

DataPaths DataPaths::SourceTree(const std::string& root) {
  return {root + "/presets", root + "/launcher/verl_keys.txt",
          {root + "/tests/validation/megatron_runs.json", root + "/tests/validation/megatron_moe_runs.json"}};
}

DataPaths FindDataPaths(const FileSystem& fs, const std::string& executable, const std::string& source_root) {
  const std::filesystem::path share =
      (std::filesystem::path(executable).parent_path().parent_path() / "share" / "kimi-plan").lexically_normal();
  if (fs.Exists((share / "presets").string())) return DataPaths::Installed(share.string());
  return DataPaths::SourceTree(source_root);
}

}  // namespace kp
