// The layout-free checkpoint (format 1) that `run` / `train --save DIR`
// writes and `--resume DIR` and `checkpoint export` read. A save of step N
// is the folder DIR/step-N holding
//   rank-R.safetensors  one per rank: the pieces of the released (Hugging
//                       Face) tensors that rank writes, each stored flat as
//                       "KIND/NAME", KIND one of model (the weights, in the
//                       parameter's dtype), master (a bf16 parameter's fp32
//                       master), exp_avg and exp_avg_sq (AdamW's moments,
//                       fp32); its __metadata__ "kimi-plan-pieces" is a JSON
//                       object "KIND/NAME" -> {"whole", "offset", "shape",
//                       "begin", "end", "step"}: the released tensor's
//                       shape, where the piece's box starts in it and the
//                       box's shape, the flat range [begin, end) of the box
//                       stored (the whole box unless the distributed
//                       optimizer split it), and AdamW's update count.
//                       A file holds one piece of a key at most.
//   manifest.json       {"format": 1, "step", "world", "layout", "shape",
//                       "files", "model"}: written by rank 0 after every
//                       rank file is complete; "model" (optional, absent
//                       in saves made before it) is the model in the preset
//                       format (specs/presets.h), from which export writes
//                       config.json.
// and DIR/latest names the newest complete step folder ("step-N"), replaced
// after its manifest. A step folder without a manifest is never read, so a
// save killed midway never replaces the last good one. Pieces of one
// released tensor from any layout tile it: a reader fills any box of it
// from every piece that overlaps the box, each element exactly once.
// No LibTorch here: the runtime writes and reads tensors through it, and
// `checkpoint export` (hf_export.h) assembles whole tensors with it.
// Thread-safety: a ShardedSave is immutable once opened.
#ifndef KIMI_PLAN_WEIGHTS_SHARDED_SAVE_H_
#define KIMI_PLAN_WEIGHTS_SHARDED_SAVE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/file_system.h"
#include "common/status.h"
#include "weights/safetensors.h"

namespace kp {

inline constexpr int kShardedSaveFormat = 1;

/// Where a stored piece lies in its released tensor.
struct PieceBox {
  std::vector<std::int64_t> whole;   ///< the released tensor's shape
  std::vector<std::int64_t> offset;  ///< the box's first element, per dimension
  std::vector<std::int64_t> shape;   ///< the box's shape
  std::int64_t begin = 0, end = 0;   ///< the box's flat elements stored, [begin, end)
  std::int64_t step = 0;             ///< AdamW's update count (moments and masters)
};

/// One rank file's piece to write: `bytes` hold end - begin elements of `dtype`.
struct PieceToWrite {
  std::string key;  ///< "KIND/NAME"
  TensorDType dtype = TensorDType::kF32;
  PieceBox box;
  std::string_view bytes;
};

/// The folder of step `step` under the save folder `dir`.
std::string StepFolder(const std::string& dir, int step);
/// Writes a rank's file `path` (written aside, then renamed).
/// InvalidArgument naming the piece whose box or bytes do not add up.
Status WriteRankFile(const FileSystem& fs, const std::string& path, const std::vector<PieceToWrite>& pieces);

struct SaveManifest {
  int step = 0;
  int world = 1;
  std::string layout;  ///< the writer's layout, for messages
  std::string shape;   ///< the model's shape (runtime_config.h's ModelShapeJson)
  std::string model;   ///< the model, preset format (ModelSpecToJson); empty: not recorded
};
/// Rank 0, once every rank file of `manifest.step` is complete: writes the
/// step folder's manifest.json, then DIR/latest (each aside, then renamed).
Status CommitSave(const FileSystem& fs, const std::string& dir, const SaveManifest& manifest);

class ShardedSave {
 public:
  /// `dir`: a step folder (with its manifest.json) or a save folder (its
  /// latest). Every rank file is mapped and every piece checked: a missing
  /// manifest or file, a box outside its tensor, a flat range outside its
  /// box, bytes that do not match it, or pieces of one tensor that disagree
  /// on its shape or dtype are one InvalidArgument / NotFound naming the
  /// file and piece.
  static Result<ShardedSave> Open(const FileSystem& fs, const std::string& dir);
  ShardedSave(ShardedSave&&) = default;
  ShardedSave& operator=(ShardedSave&&) = default;
  ShardedSave(const ShardedSave&) = delete;
  ShardedSave& operator=(const ShardedSave&) = delete;

  const SaveManifest& manifest() const { return manifest_; }
  const std::string& folder() const { return folder_; }

  struct Piece {
    const SafetensorsFile* file = nullptr;
    const TensorEntry* entry = nullptr;
    PieceBox box;
  };
  /// Every piece of "KIND/NAME", by key.
  const std::map<std::string, std::vector<Piece>>& pieces() const { return pieces_; }
  /// Whether any piece of `key` is stored.
  bool Has(const std::string& key) const { return pieces_.count(key) > 0; }

  /// The box [offset, offset + shape) of `key`'s released tensor, row-major,
  /// in the pieces' dtype, filled from every piece overlapping it, with
  /// their update count. InvalidArgument naming the key when an element is
  /// covered no time or twice, or the box does not fit the released shape;
  /// NotFound when no piece of `key` is stored.
  struct Filled {
    TensorDType dtype = TensorDType::kF32;
    std::string bytes;
    std::int64_t step = 0;
  };
  Result<Filled> Fill(const std::string& key, const std::vector<std::int64_t>& offset,
                      const std::vector<std::int64_t>& shape) const;

 private:
  ShardedSave() = default;
  std::string folder_;
  SaveManifest manifest_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, std::vector<Piece>> pieces_;
};

}  // namespace kp

#endif  // KIMI_PLAN_WEIGHTS_SHARDED_SAVE_H_
