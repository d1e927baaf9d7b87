// The one way input files are opened (issue 28): non-blocking, so that a
// FIFO with no writer cannot hold the open, and checked for kind and size
// on the open descriptor, so that the file checked is the file then read
// (RealFileSystem::ReadFileFrom) or mapped (MapFile).
// Thread-safety: an OpenFile is owned by one thread at a time.
#ifndef KIMI_PLAN_COMMON_REGULAR_FILE_H_
#define KIMI_PLAN_COMMON_REGULAR_FILE_H_

#include <cstdint>
#include <string>

#include "common/status.h"

namespace kp {

/// An open descriptor of a regular file and the size fstat gave it; the
/// descriptor closes with the object. Move-only.
class OpenFile {
 public:
  OpenFile(int fd, std::uint64_t size) : fd_(fd), size_(size) {}
  OpenFile(OpenFile&& other) noexcept : fd_(other.fd_), size_(other.size_) { other.fd_ = -1; }
  OpenFile& operator=(OpenFile&&) = delete;
  OpenFile(const OpenFile&) = delete;
  ~OpenFile();

  int fd() const { return fd_; }
  std::uint64_t size() const { return size_; }

 private:
  int fd_;
  std::uint64_t size_;
};

/// `path` opened read-only (a symbolic link followed). NotFound "PATH: no
/// such file"; InvalidArgument "PATH: is a FIFO, not a regular file" (a
/// directory, a character or block device, a socket alike) or "PATH: cannot
/// open (REASON)"; IoError "PATH: cannot stat (REASON)".
Result<OpenFile> OpenRegularFile(const std::string& path);

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_REGULAR_FILE_H_
