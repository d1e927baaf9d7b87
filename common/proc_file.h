// Reading the kernel's "Name:   value kB" files (/proc/meminfo,
// /proc/self/status) through the FileSystem interface, so callers can be
// tested with a fake.
#ifndef KIMI_PLAN_COMMON_PROC_FILE_H_
#define KIMI_PLAN_COMMON_PROC_FILE_H_

#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>

#include "common/file_system.h"
#include "common/limits.h"

namespace kp {

/// The value of the line "`field`: N kB" of the file at `path`, in bytes;
/// nullopt when the file or the line is not there.
inline std::optional<double> ProcKilobytes(const FileSystem& fs, const std::string& path, const std::string& field) {
  Result<std::string> text = fs.ReadFile(path, limits::kMaxProcFileBytes);
  if (!text.ok()) return std::nullopt;
  std::istringstream in(*text);
  const std::string key = field + ":";
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::strtod(line.c_str() + key.size(), nullptr) * 1024.0;
  return std::nullopt;
}

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_PROC_FILE_H_
