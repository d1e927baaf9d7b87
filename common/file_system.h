// The filesystem as the libraries and commands see it: reading whole files,
// listing a directory, writing a file, making directories, removing a file,
// naming a scratch file and asking whether a path exists. The real
// implementation touches the disk; tests use the fake.
#ifndef KIMI_PLAN_COMMON_FILE_SYSTEM_H_
#define KIMI_PLAN_COMMON_FILE_SYSTEM_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace kp {

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  /// The whole file, which must be a regular file (a symbolic link is
  /// followed) of at most `max_bytes` bytes: the one way the project reads
  /// an input file, so that a FIFO, a device or an endless file is refused
  /// before anything is read or anything blocks. Errors start with the path
  /// and say why: NotFound "PATH: no such file"; InvalidArgument "PATH: is a
  /// FIFO, not a regular file", "PATH: is more than MAX bytes (...)",
  /// "PATH: cannot read (Permission denied)"; the caller prefixes its flag.
  /// common/limits.h holds the bounds (kMax*FileBytes), docs/limits.md states them.
  virtual Result<std::string> ReadFile(const std::string& path, std::uint64_t max_bytes) const = 0;
  /// The bytes of the regular file `path` from `offset` to its end, at most
  /// `max_bytes` of them (ReadFile's checks and errors): how a file another
  /// program is still appending to is followed. A file now shorter than
  /// `offset` is InvalidArgument "PATH: has N bytes, fewer than the OFFSET
  /// already read (rewritten?)".
  virtual Result<std::string> ReadFileFrom(const std::string& path, std::uint64_t offset,
                                           std::uint64_t max_bytes) const = 0;
  /// File names (not paths) in `dir` ending in `suffix`, sorted.
  virtual std::vector<std::string> List(const std::string& dir, const std::string& suffix) const = 0;
  /// Writes `contents` to `path`, creating its directory; IoError naming the path.
  virtual Status WriteFile(const std::string& path, const std::string& contents) const = 0;
  /// Whether `path` names an existing file or directory.
  virtual bool Exists(const std::string& path) const = 0;
  /// Checks, writing nothing, that a file can be written at `path`: it is
  /// not a directory nor a read-only file, and its directory exists and is
  /// writable (with `create_parent`, as WriteFile does: the nearest existing
  /// ancestor is a writable directory). InvalidArgument (exit 2) naming the
  /// path and what is wrong, for the caller to prefix with its flag.
  virtual Status CheckWritableFile(const std::string& path, bool create_parent) const = 0;
  /// Checks, writing nothing, that `dir` is a writable directory or can be
  /// created as one (no ancestor is a file; the nearest existing one is a
  /// writable directory). InvalidArgument naming the path otherwise.
  virtual Status CheckWritableDirectory(const std::string& dir) const = 0;
  /// Makes `dir` and any missing ancestors; Ok when it already is a
  /// directory. IoError naming the path otherwise.
  virtual Status CreateDirectories(const std::string& dir) const = 0;
  /// Removes the file at `path`; Ok when there is none. IoError naming the
  /// path when it cannot be removed.
  virtual Status Remove(const std::string& path) const = 0;
  /// A path in the system's scratch directory for a file called `name`
  /// (nothing is created).
  virtual std::string TempPath(const std::string& name) const = 0;
  /// `path` made absolute and normal, links in its existing part followed,
  /// so that two names of one file compare equal ("a.csv", "./a.csv", a
  /// link to it).
  virtual std::string Canonical(const std::string& path) const = 0;
};

class RealFileSystem : public FileSystem {
 public:
  Result<std::string> ReadFile(const std::string& path, std::uint64_t max_bytes) const override;
  Result<std::string> ReadFileFrom(const std::string& path, std::uint64_t offset,
                                   std::uint64_t max_bytes) const override;
  std::vector<std::string> List(const std::string& dir, const std::string& suffix) const override;
  Status WriteFile(const std::string& path, const std::string& contents) const override;
  bool Exists(const std::string& path) const override;
  Status CheckWritableFile(const std::string& path, bool create_parent) const override;
  Status CheckWritableDirectory(const std::string& dir) const override;
  Status CreateDirectories(const std::string& dir) const override;
  Status Remove(const std::string& path) const override;
  std::string TempPath(const std::string& name) const override;
  std::string Canonical(const std::string& path) const override;
};

/// An in-memory filesystem keyed by full path.
class FakeFileSystem : public FileSystem {
 public:
  void Add(const std::string& path, std::string contents) { files_[path] = std::move(contents); }
  /// As the real one: NotFound for a path never added, the size bound applied.
  Result<std::string> ReadFile(const std::string& path, std::uint64_t max_bytes) const override;
  Result<std::string> ReadFileFrom(const std::string& path, std::uint64_t offset,
                                   std::uint64_t max_bytes) const override;
  std::vector<std::string> List(const std::string& dir, const std::string& suffix) const override;
  Status WriteFile(const std::string& path, const std::string& contents) const override;
  /// A file added or written, a directory added or created, or one holding a file.
  bool Exists(const std::string& path) const override;
  /// An empty directory ("" and "." always exist).
  void AddDirectory(const std::string& path) { dirs_.insert(path); }
  /// A file or directory that cannot be written.
  void SetReadOnly(const std::string& path) { read_only_.insert(path); }
  Status CheckWritableFile(const std::string& path, bool create_parent) const override;
  Status CheckWritableDirectory(const std::string& dir) const override;
  /// Records the directory (and refuses one under a read-only path or a file).
  Status CreateDirectories(const std::string& dir) const override;
  Status Remove(const std::string& path) const override;
  /// "/tmp/<name>".
  std::string TempPath(const std::string& name) const override;
  /// The path lexically normal ("./a/../b" is "b"); the fake has no links.
  std::string Canonical(const std::string& path) const override;

 private:
  bool IsDirectory(const std::string& path) const;
  Status CheckCreatable(const std::string& dir) const;
  // Mutable: writing through the const interface is the point of a fake.
  mutable std::map<std::string, std::string> files_;
  mutable std::set<std::string> dirs_;
  std::set<std::string> read_only_;
};

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_FILE_SYSTEM_H_
