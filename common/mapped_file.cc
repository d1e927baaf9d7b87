#include "common/mapped_file.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "common/regular_file.h"

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
  KP_ASSIGN_OR_RETURN(const OpenFile file, OpenRegularFile(path));
  const std::uint64_t size = file.size();
  if (size == 0) return HeldBytes("");
  // The mapping outlives the descriptor, which closes on return.
  void* at = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file.fd(), 0);
  const int err = errno;
  if (at == MAP_FAILED) return Status::InvalidArgument(path + ": cannot map (" + std::strerror(err) + ")");
  return std::shared_ptr<const ByteSource>(std::make_shared<Mapping>(at, size));
}

std::shared_ptr<const ByteSource> HeldBytes(std::string bytes) { return std::make_shared<Held>(std::move(bytes)); }

}  // namespace kp
