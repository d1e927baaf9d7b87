// A Hugging Face checkpoint folder: one model.safetensors, or shards named by
// model.safetensors.index.json ({"metadata": {...}, "weight_map": {tensor:
// shard file}}). Every shard named is opened (mapped, so nothing is read
// until a tensor's bytes are) and checked against the index: a missing
// shard, a tensor the index places in a file that does not hold it, or a
// tensor two files hold is one error naming the file and the tensor.
// Thread-safety: immutable once opened.
#ifndef KIMI_PLAN_WEIGHTS_CHECKPOINT_DIR_H_
#define KIMI_PLAN_WEIGHTS_CHECKPOINT_DIR_H_

#include <map>
#include <string>
#include <vector>

#include "common/file_system.h"
#include "common/status.h"
#include "weights/safetensors.h"

namespace kp {

class CheckpointDir {
 public:
  /// The folder `dir`: its index when there is one, else model.safetensors.
  /// NotFound naming both when neither is there.
  static Result<CheckpointDir> Open(const FileSystem& fs, const std::string& dir);
  CheckpointDir(CheckpointDir&&) = default;  // the entries' addresses move with the files
  CheckpointDir& operator=(CheckpointDir&&) = default;
  CheckpointDir(const CheckpointDir&) = delete;
  CheckpointDir& operator=(const CheckpointDir&) = delete;

  /// Every tensor of every shard, by name.
  const std::map<std::string, std::pair<const SafetensorsFile*, const TensorEntry*>>& tensors() const {
    return tensors_;
  }
  /// The tensor `name` and the file holding it, or NotFound "DIR: no tensor NAME".
  Result<std::pair<const SafetensorsFile*, const TensorEntry*>> Find(const std::string& name) const;
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  CheckpointDir() = default;
  std::string dir_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, std::pair<const SafetensorsFile*, const TensorEntry*>> tensors_;
};

}  // namespace kp

#endif  // KIMI_PLAN_WEIGHTS_CHECKPOINT_DIR_H_
