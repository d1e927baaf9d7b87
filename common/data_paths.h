// Where kimi-plan's read-only data lives: the preset catalogue, the Verl
// key list the launcher checks its overrides against, and the published
// runs `validate` checks the planner against by default. An installed tree
// (`cmake --install`) keeps them under PREFIX/share/kimi-plan beside
// PREFIX/bin; a build tree reads them from the source tree it was built
// from. Only main resolves them (FindDataPaths); libraries take paths.
#ifndef KIMI_PLAN_COMMON_DATA_PATHS_H_
#define KIMI_PLAN_COMMON_DATA_PATHS_H_

#include <string>
#include <vector>

#include "common/file_system.h"

namespace kp {

struct DataPaths {
  std::string presets;                        ///< the preset catalogue's directory
  std::string verl_keys;                      ///< the Verl key list (launcher/verl_keys.txt in the source)
  std::vector<std::string> validation_cases;  ///< `validate`'s default case files

  /// An installed tree's: SHARE/presets, SHARE/verl_keys.txt,
  /// SHARE/validation/megatron_runs.json and megatron_moe_runs.json.
  static DataPaths Installed(const std::string& share);
  /// A source tree's: ROOT/presets, ROOT/launcher/verl_keys.txt,
  /// ROOT/tests/validation/megatron_runs.json and megatron_moe_runs.json.
  static DataPaths SourceTree(const std::string& root);
};

/// The data of the executable at `executable` (an absolute path): the
/// installed tree's at its ../share/kimi-plan when that holds presets/ (an
/// installed or copied tree), else the source tree at `source_root` (the
/// one the build was made from).
DataPaths FindDataPaths(const FileSystem& fs, const std::string& executable, const std::string& source_root);

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_DATA_PATHS_H_
