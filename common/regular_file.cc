#include "common/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace kp {

namespace {

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

OpenFile::~OpenFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<OpenFile> OpenRegularFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound(path + ": no such file");
    return Status::InvalidArgument(path + ": cannot open (" + std::strerror(err) + ")");
  }
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  const int err = errno;
  OpenFile file(fd, stat_ok ? static_cast<std::uint64_t>(st.st_size) : 0);  // closes fd on the refusals too
  if (!stat_ok) return Status::IoError(path + ": cannot stat (" + std::strerror(err) + ")");
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + ": is " + FileKind(st.st_mode) + ", not a regular file");
  return Result<OpenFile>(std::move(file));
}

}  // namespace kp
