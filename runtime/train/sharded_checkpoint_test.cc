// The layout-free save (sharded_checkpoint.h, weights/sharded_save.h): a
// scaled Kimi K2.6 trained on pp 2 x dp 2 over four Gloo processes saves at
// step 3 and runs on to step 6 uninterrupted; resumed from that save on the
// same layout its steps 4-6 repeat the uninterrupted losses bit for bit (the
// weights, fp32 masters, moments and update counts are the whole state), and
// resumed on tp 2 x ep 2, on dp 4 with ep 2 x etp 2 and in one process
// they continue it within fp32 rounding of sums taken in another order.
// The same with bf16 weights and the distributed optimizer, where each DP
// rank writes the part of the moments and masters it owns. LoRA on the
// INT4 base resumes bit for bit in one process.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "runtime/comm/dist_test_util.h"
#include "runtime/model/test_util.h"
#include "runtime/train/four_rank_layouts_test_util.h"
#include "runtime/train/train_session.h"
#include "weights/sharded_save.h"

namespace kp::runtime {
namespace {

using testing::IsRankProcess;
using testing::RunRanks;

constexpr int kSaveAt = 3, kSteps = 6;

TrainConfig ScaledK26Config(bool mixed) {
  TrainConfig c;
  c.model = ScaledKimiK26Spec(224);
  c.batch = 4;
  c.seq_len = 8;
  c.steps = kSteps;
  c.warmup = 1;
  c.seed = 5;
  if (mixed) {
    c.options.weight_dtype = DType::kBf16;
    c.distributed_optimizer = true;
  }
  return c;
}

std::string SaveFolder(const std::string& test) {
  return (std::filesystem::temp_directory_path() / ("kp_sharded_" + test)).string();
}

void WriteLosses(const std::string& path, const std::vector<double>& losses) {
  std::ofstream out(path);
  out << std::setprecision(17);
  for (const double l : losses) out << l << "\n";
}

std::vector<double> ReadLosses(const std::string& path) {
  std::ifstream in(path);
  std::vector<double> out;
  for (double l; in >> l;) out.push_back(l);
  return out;
}

// Steps the session to its last step, saving into `save_dir` at kSaveAt
// when given; the losses of the steps it ran.
std::vector<double> Train(TrainSession& s, const std::string& save_dir) {
  std::vector<double> losses;
  while (s.step() < kSteps) {
    Result<SessionStepMetrics> m = s.Step();
    EXPECT_TRUE(m.ok()) << m.status().message();
    if (!m.ok()) break;
    losses.push_back(m->step.loss);
    if (!save_dir.empty() && s.step() == kSaveAt) {
      const Status saved = s.SaveShards(save_dir);
      EXPECT_TRUE(saved.ok()) << saved.message();
    }
  }
  return losses;
}

// A rank: KP_TEST_MODE "save" runs the whole run saving at kSaveAt, "resume"
// resumes from the save; rank 0 writes the losses it saw to KP_TEST_OUT.
TEST(ShardedCheckpointRank, Run) {
  if (!IsRankProcess()) GTEST_SKIP() << "a rank of ShardedCheckpoint.*";
  const std::string mode = std::getenv("KP_TEST_MODE"), dir = std::getenv("KP_TEST_DIR");
  const Result<Rendezvous> r = RendezvousFromEnvironment([](const char* n) { return std::getenv(n); });
  ASSERT_TRUE(r.ok()) << r.status().message();
  C10dOptions o;
  o.backend = "gloo";
  TrainConfig c = ScaledK26Config(std::string(std::getenv("KP_TEST_MIXED")) == "1");
  if (mode == "resume") c.resume = dir;
  RealFileSystem fs;
  const ParallelLayout* layout = testing::FourRankLayout(std::getenv("KP_TEST_LAYOUT"));
  ASSERT_NE(layout, nullptr);
  auto s = TrainSession::Create(c, *layout, *r, o, fs);
  ASSERT_TRUE(s.ok()) << s.status().message();
  const std::vector<double> losses = Train(**s, mode == "save" ? dir : "");
  if (r->rank == 0) WriteLosses(std::getenv("KP_TEST_OUT"), losses);
}

void RunLayout(const std::string& layout, const std::string& mode, const std::string& dir, bool mixed,
               const std::string& out) {
  const std::vector<int> codes =
      RunRanks("ShardedCheckpointRank.Run", 4,
               {"KP_TEST_LAYOUT=" + layout, "KP_TEST_MODE=" + mode, "KP_TEST_DIR=" + dir,
                std::string("KP_TEST_MIXED=") + (mixed ? "1" : "0"), "KP_TEST_OUT=" + out});
  EXPECT_EQ(codes, std::vector<int>(4, 0)) << layout << " " << mode;
}

// fp32 losses of O(5) whose sums ran in another order for three steps.
constexpr double kLossTolerance = 1e-6;

void SaveThenResumeEverywhere(const std::string& name, bool mixed, double tolerance) {
  const std::string dir = SaveFolder(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string whole = dir + "/whole.txt";
  RunLayout("pp2_dp2", "save", dir + "/save", mixed, whole);
  const std::vector<double> want = ReadLosses(whole);
  ASSERT_EQ(want.size(), std::size_t{kSteps});
  for (const testing::NamedLayout& l : testing::kFourRankLayouts) {
    const std::string out = dir + "/" + l.name + ".txt";
    RunLayout(l.name, "resume", dir + "/save", mixed, out);
    const std::vector<double> got = ReadLosses(out);
    ASSERT_EQ(got.size(), std::size_t{kSteps - kSaveAt}) << l.name;
    for (int i = 0; i < kSteps - kSaveAt; ++i) {
      if (std::string(l.name) == "pp2_dp2")
        EXPECT_EQ(got[i], want[kSaveAt + i]) << "the same layout, step " << kSaveAt + i + 1;
      else
        EXPECT_NEAR(got[i], want[kSaveAt + i], tolerance) << l.name << ", step " << kSaveAt + i + 1;
    }
  }
  // One process takes the save of four.
  RealFileSystem fs;
  TrainConfig c = ScaledK26Config(mixed);
  c.resume = dir + "/save";
  auto s = TrainSession::Create(c, fs);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ((*s)->step(), kSaveAt);
  const std::vector<double> got = Train(**s, "");
  ASSERT_EQ(got.size(), std::size_t{kSteps - kSaveAt});
  for (int i = 0; i < kSteps - kSaveAt; ++i)
    EXPECT_NEAR(got[i], want[kSaveAt + i], tolerance) << "one process, step " << kSaveAt + i + 1;
}

TEST(ShardedCheckpoint, Fp32SavedOnPp2Dp2ResumesOnEveryLayout) {
  if (IsRankProcess()) GTEST_SKIP();
  SaveThenResumeEverywhere("fp32", false, kLossTolerance);
}

// bf16 weights: a layout's other rounding of a sum can flip a weight's last
// bit, a relative 2^-8 of it; the loss moves by a few 1e-4 at most.
TEST(ShardedCheckpoint, Bf16WithTheDistributedOptimizerResumesOnEveryLayout) {
  if (IsRankProcess()) GTEST_SKIP();
  SaveThenResumeEverywhere("bf16", true, 1e-3);
}

// LoRA on the INT4 base: the adapters and their moments are saved beside
// the base's packed words and scales, and a resume repeats the
// uninterrupted steps bit for bit.
TEST(ShardedCheckpoint, LoraOnTheInt4BaseResumesBitForBit) {
  if (IsRankProcess()) GTEST_SKIP();
  RealFileSystem fs;
  const std::string dir = SaveFolder("lora_int4");
  std::filesystem::remove_all(dir);
  TrainConfig c = ScaledK26Config(false);
  c.lora = LoraOptions{4, 8.0};
  c.options.int4_expert_base = true;
  auto whole = TrainSession::Create(c, fs);
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  const std::vector<double> want = Train(**whole, dir);
  ASSERT_EQ(want.size(), std::size_t{kSteps});
  const Result<ShardedSave> save = ShardedSave::Open(fs, dir);
  ASSERT_TRUE(save.ok()) << save.status().message();
  for (const char* key : {"model/model.layers.1.mlp.experts.0.gate_proj.weight_packed",
                          "model/model.layers.1.mlp.experts.0.gate_proj.weight_scale",
                          "model/layers.1.moe.experts.gate_lora_a", "exp_avg/layers.1.moe.experts.gate_lora_b",
                          "exp_avg_sq/layers.0.attention.q_a.lora_a"})
    EXPECT_TRUE(save->Has(key)) << key;
  EXPECT_FALSE(save->Has("exp_avg/model.layers.1.mlp.experts.0.gate_proj.weight_packed"));
  c.resume = dir;
  auto resumed = TrainSession::Create(c, fs);
  ASSERT_TRUE(resumed.ok()) << resumed.status().message();
  EXPECT_EQ((*resumed)->step(), kSaveAt);
  const std::vector<double> got = Train(**resumed, "");
  ASSERT_EQ(got.size(), std::size_t{kSteps - kSaveAt});
  for (int i = 0; i < kSteps - kSaveAt; ++i) EXPECT_EQ(got[i], want[kSaveAt + i]) << "step " << kSaveAt + i + 1;
}

// A save that never completed (its step folder has rank files but no
// manifest) is not read: `latest` still names the last complete one; a
// model of another width is refused naming the save.
TEST(ShardedCheckpoint, AnIncompleteSaveIsNotReadAndAnotherShapeIsRefused) {
  if (IsRankProcess()) GTEST_SKIP();
  RealFileSystem fs;
  const std::string dir = SaveFolder("incomplete");
  std::filesystem::remove_all(dir);
  TrainConfig c = ScaledK26Config(false);
  c.steps = 2;
  auto s = TrainSession::Create(c, fs);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Step().ok());
  ASSERT_TRUE((*s)->SaveShards(dir).ok());
  ASSERT_TRUE((*s)->Step().ok());
  ASSERT_TRUE((*s)->SaveShards(dir).ok());
  std::filesystem::remove(dir + "/step-2/manifest.json");
  {
    std::ofstream latest(dir + "/latest");
    latest << "step-2\n";
  }
  TrainConfig r = c;
  r.resume = dir;
  auto broken = TrainSession::Create(r, fs);
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().message(), "--resume: " + dir + "/step-2: no manifest.json (the save never completed)");
  {
    std::ofstream latest(dir + "/latest");
    latest << "step-1\n";
  }
  auto resumed = TrainSession::Create(r, fs);
  ASSERT_TRUE(resumed.ok()) << resumed.status().message();
  EXPECT_EQ((*resumed)->step(), 1);
  TrainConfig wide = r;
  wide.model = ScaledKimiK26Spec(256);
  auto refused = TrainSession::Create(wide, fs);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message().rfind("--resume: " + dir + "/step-1 is a save of another shape (", 0), 0u)
      << refused.status().message();
}

}  // namespace
}  // namespace kp::runtime
