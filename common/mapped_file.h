// Read-only bytes of a large input file (a checkpoint's tensors), mapped
// rather than read, so that a rank touches only the pages of the tensors it
// takes. The real source maps a regular file; tests hand bytes they hold.
// Thread-safety: a source is immutable once made; share it freely.
#ifndef KIMI_PLAN_COMMON_MAPPED_FILE_H_
#define KIMI_PLAN_COMMON_MAPPED_FILE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace kp {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual const char* data() const = 0;
  virtual std::uint64_t size() const = 0;
};

/// The regular file `path` mapped read-only (a symbolic link followed).
/// NotFound "PATH: no such file"; InvalidArgument "PATH: is a FIFO, not a
/// regular file" (any other kind alike) or "PATH: cannot open (...)"; the
/// caller prefixes its flag. An empty file is an empty source.
Result<std::shared_ptr<const ByteSource>> MapFile(const std::string& path);

/// `bytes` as a source (tests, and files small enough to read whole).
std::shared_ptr<const ByteSource> HeldBytes(std::string bytes);

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_MAPPED_FILE_H_
