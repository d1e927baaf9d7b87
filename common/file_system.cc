#include "common/file_system.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kp {

namespace {
bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

Result<std::string> RealFileSystem::ReadFile(const std::string& path) const {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
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

bool FakeFileSystem::Exists(const std::string& path) const {
  if (files_.count(path)) return true;
  const std::string prefix = path + "/";
  auto it = files_.lower_bound(prefix);
  return it != files_.end() && it->first.rfind(prefix, 0) == 0;
}

Status FakeFileSystem::WriteFile(const std::string& path, const std::string& contents) const {
  files_[path] = contents;
  return Status::Ok();
}

Result<std::string> FakeFileSystem::ReadFile(const std::string& path) const {
  auto it = files_.find(path);
  if (it == files_.end()) return Status::NotFound(path + ": cannot open file");
  return it->second;
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
