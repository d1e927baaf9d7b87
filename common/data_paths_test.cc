// FindDataPaths against a fake file system: an installed tree's share
// directory wins over the source tree the build was made from.
#include "common/data_paths.h"

#include <gtest/gtest.h>

#include "common/file_system.h"

namespace kp {
namespace {

TEST(DataPathsTest, AnInstalledTreeReadsItsShareDirectory) {
  FakeFileSystem fs;
  fs.Add("/opt/kp/share/kimi-plan/presets/models/kimi-k2.6.json", "{}");
  const DataPaths d = FindDataPaths(fs, "/opt/kp/bin/kimi-plan", "/src/kimi-plan");
  EXPECT_EQ(d.presets, "/opt/kp/share/kimi-plan/presets");
  EXPECT_EQ(d.verl_keys, "/opt/kp/share/kimi-plan/verl_keys.txt");
  EXPECT_EQ(d.validation_cases, (std::vector<std::string>{"/opt/kp/share/kimi-plan/validation/megatron_runs.json",
                                                          "/opt/kp/share/kimi-plan/validation/megatron_moe_runs.json"}));
}

TEST(DataPathsTest, ABuildTreeReadsTheSourceTree) {
  FakeFileSystem fs;
  const DataPaths d = FindDataPaths(fs, "/src/kimi-plan/build/kimi-plan", "/src/kimi-plan");
  EXPECT_EQ(d.presets, "/src/kimi-plan/presets");
  EXPECT_EQ(d.verl_keys, "/src/kimi-plan/launcher/verl_keys.txt");
  EXPECT_EQ(d.validation_cases[0], "/src/kimi-plan/tests/validation/megatron_runs.json");
}

}  // namespace
}  // namespace kp
