// The safetensors format, read and written by the project
// (https://huggingface.co/docs/safetensors, "Format"): 8 bytes, a
// little-endian u64 N; N bytes of a UTF-8 JSON object mapping each tensor's
// name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the
// byte buffer that follows the header), with an optional "__metadata__"
// object of string values; then the byte buffer, tensors row-major and
// little-endian. The buffer is indexed entirely and without holes or
// overlaps; a header is at most 100 MB. A reader checks all of it before a
// tensor is handed out, and every error names the file and, where there is
// one, the tensor. No LibTorch here: the runtime wraps the bytes.
// Thread-safety: a SafetensorsFile is immutable once opened.
#ifndef KIMI_PLAN_WEIGHTS_SAFETENSORS_H_
#define KIMI_PLAN_WEIGHTS_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/file_system.h"
#include "common/mapped_file.h"
#include "common/status.h"

namespace kp {

/// The dtypes of the format this project reads and writes.
enum class TensorDType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

/// The format's name ("F32", "BF16", ...).
std::string_view DTypeName(TensorDType t);
/// Bytes per element.
int DTypeBytes(TensorDType t);
/// The dtype of a format name; InvalidArgument naming the allowed ones.
Result<TensorDType> ParseDType(std::string_view name);

/// A shape as "[2, 3]" for tables and messages.
std::string ShapeText(const std::vector<std::int64_t>& shape);

struct TensorEntry {
  std::string name;
  TensorDType dtype = TensorDType::kF32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  ///< offset of the first byte in the buffer after the header
  std::uint64_t end = 0;    ///< one past the last
  std::int64_t numel() const;
};

/// One tensor to write: its bytes, row-major and little-endian, must be
/// numel x DTypeBytes long.
struct TensorToWrite {
  std::string name;
  TensorDType dtype = TensorDType::kF32;
  std::vector<std::int64_t> shape;
  std::string_view bytes;
};

class SafetensorsFile {
 public:
  /// The file at `path`, mapped (MapFile) and checked.
  static Result<SafetensorsFile> Open(const std::string& path);
  /// The same checks over bytes held in memory; `path` only names them in errors.
  static Result<SafetensorsFile> FromBytes(std::shared_ptr<const ByteSource> bytes, const std::string& path);

  const std::string& path() const { return path_; }
  /// Every tensor, in buffer order.
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// The tensor called `name`, or NotFound "PATH: no tensor NAME".
  Result<const TensorEntry*> Find(const std::string& name) const;
  /// The bytes of `entry` (one of tensors()).
  std::string_view Bytes(const TensorEntry& entry) const;

 private:
  std::shared_ptr<const ByteSource> bytes_;
  std::string path_;
  std::uint64_t data_start_ = 0;
  std::vector<TensorEntry> tensors_;
  std::map<std::string, std::string> metadata_;
};

/// The file's bytes for `tensors` (in that order in the buffer, the header's
/// keys sorted as the reference writer sorts them) and `metadata`.
/// InvalidArgument naming the tensor whose bytes do not match its shape
/// and dtype, or a name given twice.
Result<std::string> EncodeSafetensors(const std::vector<TensorToWrite>& tensors,
                                      const std::map<std::string, std::string>& metadata = {});
/// EncodeSafetensors written to `path` through `fs` (beside, then renamed:
/// a reader never sees half a file, and a failed write keeps the old one).
Status WriteSafetensors(const FileSystem& fs, const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace kp

#endif  // KIMI_PLAN_WEIGHTS_SAFETENSORS_H_
