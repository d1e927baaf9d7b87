// Loading models, GPUs and topologies from the preset directory (JSON, one
// object per file, format in docs/presets.md) or from a user's own file.
// Parsing is strict: a missing field, a wrong type or an unknown key is an
// InvalidArgument naming the file and the field.
#ifndef KIMI_PLAN_SPECS_PRESETS_H_
#define KIMI_PLAN_SPECS_PRESETS_H_

#include <memory>
#include <string>
#include <vector>

#include "common/file_system.h"
#include "common/status.h"
#include "specs/calibration.h"
#include "specs/gpu_spec.h"
#include "specs/model_spec.h"
#include "specs/topology_spec.h"

namespace kp {

/// The source tree's preset directory, compiled in: the tests' and the
/// benchmarks' (the CLI finds its own beside its binary: common/data_paths.h).
std::string DefaultPresetDir();

Result<ModelSpec> ParseModelSpec(const std::string& json_text);
Result<GpuSpec> ParseGpuSpec(const std::string& json_text);
Result<TopologySpec> ParseTopologySpec(const std::string& json_text);

/// The specs back in the preset file format, so a recorded plan carries its
/// whole model and GPU: Parse*(ToJson(x)) == x.
std::string ModelSpecToJson(const ModelSpec& m);
std::string GpuSpecToJson(const GpuSpec& g);

/// Finds presets by name under `dir`/{models,gpus,topologies}/NAME.json.
class PresetCatalog {
 public:
  PresetCatalog(const FileSystem& fs, std::string dir) : fs_(fs), dir_(std::move(dir)) {}

  /// A preset by name; an unknown name is an error naming `field` (the
  /// flag, or the topology field that named it).
  Result<ModelSpec> Model(const std::string& name, const std::string& field = "--model") const;
  Result<GpuSpec> Gpu(const std::string& name, const std::string& field = "--gpu") const;
  Result<TopologySpec> Topology(const std::string& name) const;
  /// A preset-format file; one that cannot be read or parsed is an error
  /// naming its flag and path.
  Result<ModelSpec> ModelFile(const std::string& path) const;
  Result<GpuSpec> GpuFile(const std::string& path) const;
  Result<TopologySpec> TopologyFile(const std::string& path) const;

  /// The calibration table `dir`/calibration/GPU.json of a GPU preset, or
  /// null when the preset has none (the planner then uses its constants).
  Result<std::shared_ptr<const CalibrationTable>> Calibration(const std::string& gpu) const;
  /// A user's table (--calibration-file).
  Result<std::shared_ptr<const CalibrationTable>> CalibrationFile(const std::string& path) const;

  std::vector<std::string> Names(const std::string& kind) const;

 private:
  Result<std::string> Read(const std::string& kind, const std::string& name,
                           const std::string& flag) const;
  const FileSystem& fs_;
  std::string dir_;
};

}  // namespace kp

#endif  // KIMI_PLAN_SPECS_PRESETS_H_
