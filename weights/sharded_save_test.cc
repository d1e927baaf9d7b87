#include "weights/sharded_save.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <filesystem>


namespace kp {
namespace {

// The released tensor "w" is 4 x 6 with element (i, j) = 10 i + j: every
// value names its place, so a misplaced copy cannot pass.
float W(std::int64_t i, std::int64_t j) { return static_cast<float>(10 * i + j); }

// The box's elements [begin, end) as bytes.
std::string BoxBytes(const std::vector<std::int64_t>& offset, const std::vector<std::int64_t>& shape,
                     std::int64_t begin, std::int64_t end) {
  std::string out;
  for (std::int64_t f = begin; f < end; ++f) {
    const float v = W(offset[0] + f / shape[1], offset[1] + f % shape[1]);
    out.append(reinterpret_cast<const char*>(&v), 4);
  }
  return out;
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// A save folder of its own per test (ctest runs tests side by side) and `part`.
struct Save {
  std::string dir;
  RealFileSystem fs;
  std::deque<std::string> held;  // the pieces' bytes, alive (and in place) while written
  explicit Save(const std::string& part = "") {
    dir = (std::filesystem::temp_directory_path() /
           ("kp_sharded_save_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + part))
              .string();
    std::filesystem::remove_all(dir);
  }

  PieceToWrite Piece(const std::string& key, std::vector<std::int64_t> offset, std::vector<std::int64_t> shape,
                     std::int64_t begin, std::int64_t end) {
    held.push_back(BoxBytes(offset, shape, begin, end));
    return {key, TensorDType::kF32, PieceBox{{4, 6}, offset, shape, begin, end, 3}, held.back()};
  }
};

// Three ranks of one layout: rows [0, 2) whole on rank 0; rows [2, 4) cut
// into the flat ranges [0, 5) and [5, 12), as the distributed optimizer
// cuts a parameter, on ranks 1 and 2.
Status WriteThreeRanks(Save& s, int step) {
  const std::string folder = StepFolder(s.dir, step);
  KP_RETURN_IF_ERROR(WriteRankFile(s.fs, folder + "/rank-0.safetensors", {s.Piece("model/w", {0, 0}, {2, 6}, 0, 12)}));
  KP_RETURN_IF_ERROR(WriteRankFile(s.fs, folder + "/rank-1.safetensors", {s.Piece("model/w", {2, 0}, {2, 6}, 0, 5)}));
  KP_RETURN_IF_ERROR(WriteRankFile(s.fs, folder + "/rank-2.safetensors", {s.Piece("model/w", {2, 0}, {2, 6}, 5, 12)}));
  return CommitSave(s.fs, s.dir, SaveManifest{step, 3, "pp 1 dp 3", "{}", ""});
}

TEST(ShardedSaveTest, AnyBoxIsFilledFromThePiecesOfAnotherLayout) {
  Save s;
  ASSERT_TRUE(WriteThreeRanks(s, 7).ok());
  const Result<ShardedSave> save = ShardedSave::Open(s.fs, s.dir);
  ASSERT_TRUE(save.ok()) << save.status().message();
  EXPECT_EQ(save->manifest().step, 7);
  EXPECT_EQ(save->folder(), s.dir + "/step-7");
  // A column split (TP of another layout) across both row blocks and both
  // flat ranges: rows 1-3, columns 2-4.
  const auto box = save->Fill("model/w", {1, 2}, {3, 3});
  ASSERT_TRUE(box.ok()) << box.status().message();
  EXPECT_EQ(box->step, 3);
  const std::vector<float> got = Floats(box->bytes);
  const std::vector<float> want = {W(1, 2), W(1, 3), W(1, 4), W(2, 2), W(2, 3), W(2, 4), W(3, 2), W(3, 3), W(3, 4)};
  EXPECT_EQ(got, want);
  const auto whole = save->Fill("model/w", {0, 0}, {4, 6});
  ASSERT_TRUE(whole.ok());
  for (std::int64_t f = 0; f < 24; ++f) EXPECT_EQ(Floats(whole->bytes)[f], W(f / 6, f % 6)) << f;
}

TEST(ShardedSaveTest, AnElementInNoPieceOrInTwoIsRefusedNamingIt) {
  Save s;
  const std::string folder = StepFolder(s.dir, 1);
  ASSERT_TRUE(WriteRankFile(s.fs, folder + "/rank-0.safetensors", {s.Piece("model/w", {0, 0}, {2, 6}, 0, 12)}).ok());
  ASSERT_TRUE(WriteRankFile(s.fs, folder + "/rank-1.safetensors", {s.Piece("model/w", {2, 0}, {2, 6}, 0, 5)}).ok());
  ASSERT_TRUE(WriteRankFile(s.fs, folder + "/rank-2.safetensors", {s.Piece("model/w", {2, 0}, {2, 6}, 4, 12)}).ok());
  ASSERT_TRUE(CommitSave(s.fs, s.dir, SaveManifest{1, 3, "", "{}", ""}).ok());
  const Result<ShardedSave> save = ShardedSave::Open(s.fs, s.dir);
  ASSERT_TRUE(save.ok()) << save.status().message();
  EXPECT_EQ(save->Fill("model/w", {0, 0}, {4, 6}).status().message(),
            folder + ": model/w: element [2, 4] is in two pieces");
  EXPECT_TRUE(save->Fill("model/w", {0, 0}, {1, 6}).ok());  // row 0: each element once
  EXPECT_EQ(save->Fill("model/w", {3, 0}, {2, 6}).status().message(),
            folder + ": model/w: the model wants [2, 6] at [3, 0] of a tensor saved as [4, 6]");
  EXPECT_EQ(save->Fill("model/v", {0}, {1}).status().code(), Status::Code::kNotFound);

  Save gap("_gap");
  const std::string gap_folder = StepFolder(gap.dir, 1);
  ASSERT_TRUE(WriteRankFile(gap.fs, gap_folder + "/rank-0.safetensors", {gap.Piece("model/w", {0, 0}, {4, 6}, 0, 13)}).ok());
  ASSERT_TRUE(WriteRankFile(gap.fs, gap_folder + "/rank-1.safetensors", {gap.Piece("model/w", {0, 0}, {4, 6}, 14, 24)}).ok());
  ASSERT_TRUE(CommitSave(gap.fs, gap.dir, SaveManifest{1, 2, "", "{}", ""}).ok());
  const Result<ShardedSave> holed = ShardedSave::Open(gap.fs, gap.dir);
  ASSERT_TRUE(holed.ok());
  EXPECT_EQ(holed->Fill("model/w", {0, 0}, {4, 6}).status().message(), gap_folder + ": model/w: element [2, 1] is in no piece");
}

TEST(ShardedSaveTest, ASaveWithoutItsManifestIsNeverRead) {
  Save s;
  ASSERT_TRUE(WriteThreeRanks(s, 1).ok());
  // Step 2's rank files are written, its manifest is not (a save killed
  // before rank 0 committed it): latest still names step 1.
  ASSERT_TRUE(WriteRankFile(s.fs, StepFolder(s.dir, 2) + "/rank-0.safetensors", {s.Piece("model/w", {0, 0}, {4, 6}, 0, 24)}).ok());
  const Result<ShardedSave> save = ShardedSave::Open(s.fs, s.dir);
  ASSERT_TRUE(save.ok()) << save.status().message();
  EXPECT_EQ(save->manifest().step, 1);
  EXPECT_EQ(ShardedSave::Open(s.fs, StepFolder(s.dir, 2)).status().message(),
            s.dir + "/step-2: neither manifest.json nor latest is there (not a save, or a save that never completed)");
  // A rank file the manifest names is missing.
  std::filesystem::remove(StepFolder(s.dir, 1) + "/rank-2.safetensors");
  EXPECT_EQ(ShardedSave::Open(s.fs, s.dir).status().code(), Status::Code::kNotFound);
}

TEST(ShardedSaveTest, PiecesThatDoNotAddUpAreRefusedNamingFileAndPiece) {
  Save s;
  const std::string path = StepFolder(s.dir, 1) + "/rank-0.safetensors";
  EXPECT_EQ(WriteRankFile(s.fs, path, {s.Piece("model/w", {3, 0}, {2, 6}, 0, 12)}).message(),
            path + ": piece model/w: the box at [3, 0] of shape [2, 6] is not inside [4, 6]");
  EXPECT_EQ(WriteRankFile(s.fs, path, {s.Piece("model/w", {0, 0}, {2, 6}, 5, 13)}).message(),
            path + ": piece model/w: the range [5, 13) is not inside the box's 12 elements");
  // Two files that disagree on the tensor's shape.
  ASSERT_TRUE(WriteRankFile(s.fs, path, {s.Piece("model/w", {0, 0}, {2, 6}, 0, 12)}).ok());
  PieceToWrite other = s.Piece("model/w", {2, 0}, {2, 6}, 0, 12);
  other.box.whole = {5, 6};
  const std::string path1 = StepFolder(s.dir, 1) + "/rank-1.safetensors";
  ASSERT_TRUE(WriteRankFile(s.fs, path1, {other}).ok());
  ASSERT_TRUE(CommitSave(s.fs, s.dir, SaveManifest{1, 2, "", "{}", ""}).ok());
  EXPECT_EQ(ShardedSave::Open(s.fs, s.dir).status().message(),
            path1 + ": piece model/w: F32 [5, 6], where " + path + " has F32 [4, 6]");
}

}  // namespace
}  // namespace kp
