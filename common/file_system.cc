#include "common/file_system.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/regular_file.h"

namespace kp {

namespace {
bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

std::string RealFileSystem::Canonical(const std::string& path) const {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
  return ec ? std::filesystem::path(path).lexically_normal().string() : p.string();
}

namespace {

Status Shrank(const std::string& path, std::uint64_t size, std::uint64_t offset) {
  return Status::InvalidArgument(path + ": has " + std::to_string(size) + " bytes, fewer than the " +
                                 std::to_string(offset) + " already read (rewritten?)");
}

Status TooBig(const std::string& path, std::uint64_t max_bytes) {
  return Status::InvalidArgument(path + ": is more than " + std::to_string(max_bytes) +
                                 " bytes, the most this kind of file may hold (docs/limits.md)");
}

}  // namespace

Result<std::string> RealFileSystem::ReadFile(const std::string& path, std::uint64_t max_bytes) const {
  return ReadFileFrom(path, 0, max_bytes);
}

Result<std::string> RealFileSystem::ReadFileFrom(const std::string& path, std::uint64_t offset,
                                                 std::uint64_t max_bytes) const {
  KP_ASSIGN_OR_RETURN(const OpenFile file, OpenRegularFile(path));
  const std::uint64_t size = file.size();
  if (offset > 0 && size < offset) return Shrank(path, size, offset);
  if (size - std::min(size, offset) > max_bytes) return TooBig(path, max_bytes);
  if (offset > 0 && ::lseek(file.fd(), static_cast<off_t>(offset), SEEK_SET) < 0)
    return Status::IoError(path + ": cannot seek (" + std::strerror(errno) + ")");
  // The size is only a hint (files under /proc say 0, a file may grow while
  // it is read): read up to one byte past the bound and refuse if it is there.
  std::string out;
  out.reserve(static_cast<std::size_t>(size - std::min(size, offset)));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(file.fd(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::InvalidArgument(path + ": cannot read (" + std::strerror(errno) + ")");
    if (n == 0) break;
    if (out.size() + static_cast<std::size_t>(n) > max_bytes) return TooBig(path, max_bytes);
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

std::vector<std::string> RealFileSystem::List(const std::string& dir, const std::string& suffix) const {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (EndsWith(name, suffix)) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Status RealFileSystem::WriteFile(const std::string& path, const std::string& contents) const {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return Status::IoError(path + ": " + ec.message());
  // Write beside and rename, so a reader never sees half a file.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << contents;
    if (!out) return Status::IoError(path + ": cannot write");
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::IoError(path + ": " + ec.message());
  return Status::Ok();
}

bool RealFileSystem::Exists(const std::string& path) const {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

Status RealFileSystem::CreateDirectories(const std::string& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError("cannot create " + dir + ": " + ec.message());
  return Status::Ok();
}

Status RealFileSystem::Remove(const std::string& path) const {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  if (ec) return Status::IoError("cannot remove " + path + ": " + ec.message());
  return Status::Ok();
}

std::string RealFileSystem::TempPath(const std::string& name) const {
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
  return ((ec ? std::filesystem::path("/tmp") : dir) / name).string();
}

namespace {

namespace fs = std::filesystem;

// The directory of `path`, "." for a bare name.
fs::path ParentOf(const fs::path& path) {
  const fs::path parent = path.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

// `dir` exists as a writable directory, or its nearest existing ancestor is
// one (so that create_directories would make it).
Status CheckCreatableDirectory(const fs::path& dir) {
  std::error_code ec;
  for (fs::path p = dir;; p = ParentOf(p)) {
    const fs::file_status st = fs::status(p, ec);
    if (st.type() == fs::file_type::not_found) {
      if (p == ParentOf(p)) break;
      continue;
    }
    if (!fs::is_directory(st)) return Status::InvalidArgument(p.string() + " is not a directory");
    if (::access(p.c_str(), W_OK) != 0) return Status::InvalidArgument("directory " + p.string() + " is not writable");
    return Status::Ok();
  }
  return Status::InvalidArgument(dir.string() + ": no existing directory above it");
}

}  // namespace

Status RealFileSystem::CheckWritableFile(const std::string& path, bool create_parent) const {
  if (path.empty()) return Status::InvalidArgument("the path is empty");
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_directory(st)) return Status::InvalidArgument(path + " is a directory, not a file");
  if (fs::exists(st)) {
    if (!fs::is_regular_file(st)) return Status::InvalidArgument(path + " is not a regular file");
    if (::access(path.c_str(), W_OK) != 0) return Status::InvalidArgument(path + " is a read-only file");
  }
  const fs::path parent = ParentOf(path);
  if (create_parent) return CheckCreatableDirectory(parent).WithContext(path);
  const fs::file_status pst = fs::status(parent, ec);
  if (!fs::exists(pst)) return Status::InvalidArgument(path + ": directory " + parent.string() + " does not exist");
  if (!fs::is_directory(pst)) return Status::InvalidArgument(path + ": " + parent.string() + " is not a directory");
  if (::access(parent.c_str(), W_OK) != 0)
    return Status::InvalidArgument(path + ": directory " + parent.string() + " is not writable");
  return Status::Ok();
}

Status RealFileSystem::CheckWritableDirectory(const std::string& dir) const {
  if (dir.empty()) return Status::InvalidArgument("the path is empty");
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    return Status::InvalidArgument(dir + " is a file, not a directory");
  return CheckCreatableDirectory(dir).WithContext(dir);
}

bool FakeFileSystem::IsDirectory(const std::string& path) const {
  return path.empty() || path == "." || path == "/" || dirs_.count(path) || (Exists(path) && !files_.count(path));
}

Status FakeFileSystem::CheckCreatable(const std::string& dir) const {
  for (std::string p = dir;;) {
    if (files_.count(p)) return Status::InvalidArgument(p + " is not a directory");
    if (IsDirectory(p)) {
      if (read_only_.count(p)) return Status::InvalidArgument("directory " + p + " is not writable");
      return Status::Ok();
    }
    const std::size_t slash = p.rfind('/');
    p = slash == std::string::npos ? "" : p.substr(0, slash);
  }
}

Status FakeFileSystem::CheckWritableFile(const std::string& path, bool create_parent) const {
  if (path.empty()) return Status::InvalidArgument("the path is empty");
  if (IsDirectory(path)) return Status::InvalidArgument(path + " is a directory, not a file");
  if (read_only_.count(path)) return Status::InvalidArgument(path + " is a read-only file");
  const std::size_t slash = path.rfind('/');
  const std::string parent = slash == std::string::npos ? "" : path.substr(0, slash);
  if (!create_parent && !IsDirectory(parent)) {
    if (files_.count(parent)) return Status::InvalidArgument(path + ": " + parent + " is not a directory");
    return Status::InvalidArgument(path + ": directory " + parent + " does not exist");
  }
  return CheckCreatable(parent).WithContext(path);
}

Status FakeFileSystem::CheckWritableDirectory(const std::string& dir) const {
  if (dir.empty()) return Status::InvalidArgument("the path is empty");
  if (files_.count(dir)) return Status::InvalidArgument(dir + " is a file, not a directory");
  return CheckCreatable(dir).WithContext(dir);
}

bool FakeFileSystem::Exists(const std::string& path) const {
  if (files_.count(path) || dirs_.count(path)) return true;
  const std::string prefix = path + "/";
  auto it = files_.lower_bound(prefix);
  return it != files_.end() && it->first.rfind(prefix, 0) == 0;
}

Status FakeFileSystem::WriteFile(const std::string& path, const std::string& contents) const {
  files_[path] = contents;
  return Status::Ok();
}

Status FakeFileSystem::CreateDirectories(const std::string& dir) const {
  if (files_.count(dir)) return Status::IoError("cannot create " + dir + ": a file is there");
  const Status creatable = CheckCreatable(dir);
  if (!creatable.ok()) return Status::IoError("cannot create " + dir + ": " + creatable.message());
  dirs_.insert(dir);
  return Status::Ok();
}

Status FakeFileSystem::Remove(const std::string& path) const {
  if (read_only_.count(path)) return Status::IoError("cannot remove " + path + ": read-only");
  files_.erase(path);
  return Status::Ok();
}

std::string FakeFileSystem::TempPath(const std::string& name) const { return "/tmp/" + name; }

std::string FakeFileSystem::Canonical(const std::string& path) const {
  return std::filesystem::path(path).lexically_normal().string();
}

Result<std::string> FakeFileSystem::ReadFile(const std::string& path, std::uint64_t max_bytes) const {
  return ReadFileFrom(path, 0, max_bytes);
}

Result<std::string> FakeFileSystem::ReadFileFrom(const std::string& path, std::uint64_t offset,
                                                 std::uint64_t max_bytes) const {
  auto it = files_.find(path);
  if (it == files_.end()) return Status::NotFound(path + ": no such file");
  if (it->second.size() < offset) return Shrank(path, it->second.size(), offset);
  if (it->second.size() - offset > max_bytes) return TooBig(path, max_bytes);
  return it->second.substr(static_cast<std::size_t>(offset));
}

std::vector<std::string> FakeFileSystem::List(const std::string& dir, const std::string& suffix) const {
  std::vector<std::string> out;
  const std::string prefix = dir + "/";
  for (const auto& [path, _] : files_) {
    if (path.rfind(prefix, 0) != 0) continue;
    const std::string name = path.substr(prefix.size());
    if (name.find('/') == std::string::npos && EndsWith(name, suffix)) out.push_back(name);
  }
  return out;
}

}  // namespace kp
