#include "common/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kp {

namespace {

class Mapping : public ByteSource {
 public:
  Mapping(void* at, std::uint64_t size) : at_(at), size_(size) {}
  ~Mapping() override {
    if (at_ != nullptr) ::munmap(at_, size_);
  }
  const char* data() const override { return static_cast<const char*>(at_); }
  std::uint64_t size() const override { return size_; }

 private:
  void* at_;
  std::uint64_t size_;
};

class Held : public ByteSource {
 public:
  explicit Held(std::string bytes) : bytes_(std::move(bytes)) {}
  const char* data() const override { return bytes_.data(); }
  std::uint64_t size() const override { return bytes_.size(); }

 private:
  std::string bytes_;
};

}  // namespace

Result<std::shared_ptr<const ByteSource>> MapFile(const std::string& path) {
  // Non-blocking, so a FIFO with no writer cannot hold the open; the kind
  // is read from the open descriptor, so the file checked is the file mapped.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound(path + ": no such file");
    return Status::InvalidArgument(path + ": cannot open (" + std::strerror(err) + ")");
  }
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  if (!stat_ok || !S_ISREG(st.st_mode)) {
    ::close(fd);
    if (!stat_ok) return Status::IoError(path + ": cannot stat");
    const char* kind = S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a special file";
    return Status::InvalidArgument(path + ": is " + std::string(kind) + ", not a regular file");
  }
  const std::uint64_t size = static_cast<std::uint64_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return HeldBytes("");
  }
  void* at = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping outlives the descriptor
  if (at == MAP_FAILED) return Status::InvalidArgument(path + ": cannot map (" + std::strerror(err) + ")");
  return std::shared_ptr<const ByteSource>(std::make_shared<Mapping>(at, size));
}

std::shared_ptr<const ByteSource> HeldBytes(std::string bytes) { return std::make_shared<Held>(std::move(bytes)); }

}  // namespace kp
