#include "common/file_system.h"
#include "common/mapped_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

namespace kp {
namespace {

namespace fs = std::filesystem;

class OutputCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/output_check_" + std::to_string(::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/sub");
    std::ofstream(dir_ + "/file") << "x";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
  RealFileSystem real_;
};

TEST_F(OutputCheckTest, AFileInAnExistingDirectoryIsWritable) {
  EXPECT_TRUE(real_.CheckWritableFile(dir_ + "/new.csv", false).ok());
  EXPECT_TRUE(real_.CheckWritableFile(dir_ + "/file", false).ok());
  EXPECT_TRUE(real_.CheckWritableDirectory(dir_ + "/sub").ok());
  EXPECT_TRUE(real_.CheckWritableDirectory(dir_ + "/new/deeper").ok());
  EXPECT_FALSE(fs::exists(dir_ + "/new"));  // checked, not created
}

TEST_F(OutputCheckTest, RefusesWhatCannotBeWrittenNamingThePath) {
  auto refused = [](const Status& s, const std::string& what) {
    EXPECT_EQ(s.ExitCode(), 2) << s.message();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  refused(real_.CheckWritableFile(dir_ + "/sub", false), "is a directory");
  refused(real_.CheckWritableFile(dir_ + "/missing/x.pt", false), "does not exist");
  refused(real_.CheckWritableFile(dir_ + "/file/x.pt", false), "is not a directory");
  refused(real_.CheckWritableFile(dir_ + "/file/x.csv", true), "is not a directory");
  refused(real_.CheckWritableFile("", false), "empty");
  refused(real_.CheckWritableDirectory(dir_ + "/file"), "is a file");
  refused(real_.CheckWritableDirectory(dir_ + "/file/deeper"), "is not a directory");
  EXPECT_TRUE(real_.CheckWritableFile(dir_ + "/missing/x.csv", true).ok());
  EXPECT_FALSE(fs::exists(dir_ + "/missing"));
}

TEST_F(OutputCheckTest, CreatesDirectoriesAndRemovesFiles) {
  EXPECT_TRUE(real_.CreateDirectories(dir_ + "/a/b/c").ok());
  EXPECT_TRUE(fs::is_directory(dir_ + "/a/b/c"));
  EXPECT_TRUE(real_.CreateDirectories(dir_ + "/a/b/c").ok());  // already there
  const Status onto_file = real_.CreateDirectories(dir_ + "/file/x");
  EXPECT_EQ(onto_file.code(), Status::Code::kIoError);
  EXPECT_NE(onto_file.message().find(dir_ + "/file/x"), std::string::npos) << onto_file.message();
  EXPECT_TRUE(real_.Remove(dir_ + "/file").ok());
  EXPECT_FALSE(fs::exists(dir_ + "/file"));
  EXPECT_TRUE(real_.Remove(dir_ + "/file").ok());  // nothing to remove
  const std::string temp = real_.TempPath("kp-scratch");
  EXPECT_EQ(fs::path(temp).filename(), "kp-scratch");
  EXPECT_TRUE(fs::is_directory(fs::path(temp).parent_path()));
}

TEST(FakeFileSystemTest, CreatesAndRemovesLikeTheRealOne) {
  FakeFileSystem fake;
  fake.Add("runs/a.csv", "x");
  fake.AddDirectory("locked");
  fake.SetReadOnly("locked");
  EXPECT_TRUE(fake.CreateDirectories("ckpt/deep").ok());
  EXPECT_TRUE(fake.Exists("ckpt/deep"));
  EXPECT_FALSE(fake.CreateDirectories("runs/a.csv").ok());
  EXPECT_FALSE(fake.CreateDirectories("locked/sub").ok());
  EXPECT_TRUE(fake.Remove("runs/a.csv").ok());
  EXPECT_FALSE(fake.Exists("runs/a.csv"));
  EXPECT_EQ(fake.TempPath("s"), "/tmp/s");
}

TEST(FakeFileSystemTest, ChecksOutputsLikeTheRealOne) {
  FakeFileSystem fake;
  fake.Add("runs/a.csv", "x");
  fake.AddDirectory("empty");
  fake.SetReadOnly("locked");
  fake.AddDirectory("locked");
  EXPECT_TRUE(fake.CheckWritableFile("runs/b.csv", false).ok());
  EXPECT_TRUE(fake.CheckWritableFile("empty/b.csv", false).ok());
  EXPECT_TRUE(fake.CheckWritableFile("new/b.csv", true).ok());
  EXPECT_FALSE(fake.CheckWritableFile("new/b.csv", false).ok());
  EXPECT_FALSE(fake.CheckWritableFile("runs", false).ok());
  EXPECT_FALSE(fake.CheckWritableFile("runs/a.csv/x", true).ok());
  EXPECT_FALSE(fake.CheckWritableFile("locked/x", false).ok());
  EXPECT_TRUE(fake.CheckWritableDirectory("runs").ok());
  EXPECT_TRUE(fake.CheckWritableDirectory("new/dir").ok());
  EXPECT_FALSE(fake.CheckWritableDirectory("runs/a.csv").ok());
  EXPECT_FALSE(fake.CheckWritableDirectory("locked/sub").ok());
}

// The one reader of input files (issue 28): a FIFO, a device or a directory
// is refused before anything is read or anything blocks, and a file is read
// at most one byte past its bound.
TEST_F(OutputCheckTest, ReadFileTakesRegularFilesWithinTheirBoundOnly) {
  std::ofstream(dir_ + "/ten") << "0123456789";
  EXPECT_EQ(*real_.ReadFile(dir_ + "/ten", 10), "0123456789");
  const Result<std::string> big = real_.ReadFile(dir_ + "/ten", 9);
  EXPECT_EQ(big.status().message(), dir_ + "/ten: is more than 9 bytes, the most this kind of file may hold (docs/limits.md)");
  EXPECT_EQ(big.status().ExitCode(), 2);
  ASSERT_EQ(::mkfifo((dir_ + "/fifo").c_str(), 0600), 0);
  EXPECT_EQ(real_.ReadFile(dir_ + "/fifo", 10).status().message(), dir_ + "/fifo: is a FIFO, not a regular file");
  fs::create_symlink("/dev/zero", dir_ + "/zero");
  EXPECT_EQ(real_.ReadFile(dir_ + "/zero", 1 << 20).status().message(),
            dir_ + "/zero: is a character device, not a regular file");
  EXPECT_EQ(real_.ReadFile(dir_ + "/sub", 10).status().message(), dir_ + "/sub: is a directory, not a regular file");
  EXPECT_EQ(real_.ReadFile(dir_ + "/none", 10).status().code(), Status::Code::kNotFound);
  // A kernel file says its size is 0 and is read by its content.
  const Result<std::string> status = real_.ReadFile("/proc/self/status", 1 << 20);
  ASSERT_TRUE(status.ok()) << status.status().message();
  EXPECT_NE(status->find("VmRSS"), std::string::npos);
}

// MapFile opens as ReadFile does (OpenRegularFile): the same refusals, the
// file's own bytes, an empty file an empty source.
TEST_F(OutputCheckTest, MapFileTakesRegularFilesOnly) {
  std::ofstream(dir_ + "/ten") << "0123456789";
  const Result<std::shared_ptr<const ByteSource>> ten = MapFile(dir_ + "/ten");
  ASSERT_TRUE(ten.ok()) << ten.status().message();
  EXPECT_EQ(std::string((*ten)->data(), (*ten)->size()), "0123456789");
  std::ofstream(dir_ + "/empty").flush();
  EXPECT_EQ((*MapFile(dir_ + "/empty"))->size(), 0u);
  ASSERT_EQ(::mkfifo((dir_ + "/fifo").c_str(), 0600), 0);
  EXPECT_EQ(MapFile(dir_ + "/fifo").status().message(), dir_ + "/fifo: is a FIFO, not a regular file");
  EXPECT_EQ(MapFile("/dev/zero").status().message(), "/dev/zero: is a character device, not a regular file");
  EXPECT_EQ(MapFile(dir_ + "/sub").status().message(), dir_ + "/sub: is a directory, not a regular file");
  EXPECT_EQ(MapFile(dir_ + "/none").status().message(), dir_ + "/none: no such file");
}

TEST(FakeFileSystemTest, ReadFileAppliesTheBoundAsTheRealOneDoes) {
  FakeFileSystem fake;
  fake.Add("a.json", "{}");
  EXPECT_EQ(*fake.ReadFile("a.json", 2), "{}");
  EXPECT_EQ(fake.ReadFile("a.json", 1).status().ExitCode(), 2);
  EXPECT_EQ(fake.ReadFile("b.json", 1).status().message(), "b.json: no such file");
}

// A file another program appends to is read from where the last read
// stopped, the same way on disk and in the fake; one that shrank is named.
TEST_F(OutputCheckTest, ReadFileFromReadsWhatWasAppendedSince) {
  FakeFileSystem fake;
  for (const FileSystem* fs : {static_cast<const FileSystem*>(&real_), static_cast<const FileSystem*>(&fake)}) {
    const std::string path = dir_ + "/grows";
    std::ofstream(path) << "abc";
    fake.Add(path, "abc");
    EXPECT_EQ(*fs->ReadFileFrom(path, 0, 10), "abc");
    std::ofstream(path, std::ios::app) << "defg";
    fake.Add(path, "abcdefg");
    EXPECT_EQ(*fs->ReadFileFrom(path, 3, 10), "defg");
    EXPECT_EQ(*fs->ReadFileFrom(path, 7, 10), "");
    EXPECT_EQ(fs->ReadFileFrom(path, 3, 3).status().ExitCode(), 2);  // 4 new bytes, bound 3
    EXPECT_EQ(fs->ReadFileFrom(path, 9, 10).status().message(),
              path + ": has 7 bytes, fewer than the 9 already read (rewritten?)");
  }
}

TEST_F(OutputCheckTest, CanonicalPathsNameOneFileOnce) {
  fs::create_symlink(dir_ + "/file", dir_ + "/link");
  EXPECT_EQ(real_.Canonical(dir_ + "/file"), real_.Canonical(dir_ + "/sub/../file"));
  EXPECT_EQ(real_.Canonical(dir_ + "/file"), real_.Canonical(dir_ + "/link"));
  EXPECT_NE(real_.Canonical(dir_ + "/file"), real_.Canonical(dir_ + "/other"));
}

}  // namespace
}  // namespace kp
