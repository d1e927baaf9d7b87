// --init-from: a scaled Kimi K2.6 written in the released Hugging Face layout
// by the project's writer (hf_checkpoint.h, INT4 routed experts) starts a
// session, in one process and in three layouts over four processes (Gloo),
// each rank reading only its slices. The first step's loss is the loss of
// the written model's forward on the step's batch, computed here apart from
// the session, within fp32 rounding: every layout loads the same weights,
// and the first loss is taken before any update.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include "runtime/comm/dist_test_util.h"
#include "runtime/model/hf_checkpoint.h"
#include "runtime/model/test_util.h"
#include "runtime/train/four_rank_layouts_test_util.h"
#include "runtime/train/train_session.h"
#include "runtime/train/trainer_internal.h"

namespace kp::runtime {
namespace {

using testing::IsRankProcess;
using testing::RunRanks;

// Hidden 224 scales K2.6's expert FFN (2048 of 7168) to 64: whole INT4
// groups of 32; two heads and a vocabulary of 128 split over tp 2.
TrainConfig ScaledK26Config() {
  TrainConfig c;
  c.model = ScaledKimiK26Spec(224);
  c.batch = 4;
  c.seq_len = 8;
  c.steps = 1;
  c.warmup = 0;
  c.seed = 5;
  return c;
}

// One folder per test (ctest runs tests side by side), named to the ranks.
std::string CheckpointFolder(const std::string& test) {
  return (std::filesystem::temp_directory_path() / ("kp_init_from_" + test)).string();
}

// The checkpoint: another initialisation (seed 11) than the session's own
// (seed 5), its routed experts as INT4.
void WriteCheckpoint(const TrainConfig& c, const std::string& dir) {
  RealFileSystem fs;
  std::filesystem::remove_all(dir);
  ModelOptions o;
  o.seed = 11;
  auto model = BuildModel(c.model, o).value();
  const Status saved = SaveHfCheckpoint(*model, fs, dir, /*int4_experts=*/true);
  ASSERT_TRUE(saved.ok()) << saved.message();
}

// The written model's loss on step 1's batch, from the checkpoint folder
// loaded into a model built whole, outside any session.
double ForwardLoss(const TrainConfig& c) {
  RealFileSystem fs;
  ModelOptions o;
  o.seed = 99;
  auto model = BuildModel(c.model, o).value();
  const Result<CheckpointDir> dir = CheckpointDir::Open(fs, c.init_from);
  EXPECT_TRUE(dir.ok());
  EXPECT_TRUE(LoadHfCheckpoint(*model, *dir).ok());
  const std::vector<std::int64_t> tokens = OpenTokenSource(c, fs).value()->Batch(0, c.batch, c.seq_len + 1);
  const torch::Tensor rows = torch::tensor(tokens, torch::kLong).reshape({c.batch, c.seq_len + 1});
  torch::NoGradGuard no_grad;
  return LanguageModelLoss(model->forward(rows.narrow(1, 0, c.seq_len)), rows.narrow(1, 1, c.seq_len)).item<double>();
}

double FirstLoss(Result<std::unique_ptr<TrainSession>> session) {
  EXPECT_TRUE(session.ok()) << session.status().message();
  if (!session.ok()) return NAN;
  Result<SessionStepMetrics> m = (*session)->Step();
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? m->step.loss : NAN;
}

// fp32: the same weights, the sums in other orders (the losses are O(5)).
constexpr double kLossTolerance = 1e-6;

TEST(TrainSessionInitFrom, OneProcessStartsFromTheWrittenModel) {
  if (IsRankProcess()) GTEST_SKIP();
  RealFileSystem fs;
  TrainConfig c = ScaledK26Config();
  const double own = FirstLoss(TrainSession::Create(c, fs));
  c.init_from = CheckpointFolder("one");
  WriteCheckpoint(c, c.init_from);
  const double loaded = FirstLoss(TrainSession::Create(c, fs)), want = ForwardLoss(c);
  EXPECT_NEAR(loaded, want, kLossTolerance);
  EXPECT_GT(std::abs(own - want), 1e-3) << "the session's own initialisation gives the checkpoint's loss";
}

// LoRA on the INT4 base (--lora-native-base) takes the released INT4
// experts' bytes: its first loss is the written model's (the adapters start
// at B = 0), computed apart from the session on dequantized weights.
TEST(TrainSessionInitFrom, TheInt4BaseStartsFromTheWrittenModel) {
  if (IsRankProcess()) GTEST_SKIP();
  RealFileSystem fs;
  TrainConfig c = ScaledK26Config();
  c.lora = LoraOptions{4, 8.0};
  c.options.int4_expert_base = true;
  c.init_from = CheckpointFolder("int4_base");
  WriteCheckpoint(c, c.init_from);
  EXPECT_NEAR(FirstLoss(TrainSession::Create(c, fs)), ForwardLoss(c), kLossTolerance);
}

TEST(TrainSessionInitFrom, ThreeLayoutsOfFourRanksEachStartFromTheWrittenModel) {
  if (IsRankProcess()) GTEST_SKIP();
  TrainConfig c = ScaledK26Config();
  c.init_from = CheckpointFolder("layouts");
  WriteCheckpoint(c, c.init_from);
  std::ostringstream want;
  want << std::setprecision(17) << ForwardLoss(c);
  for (const testing::NamedLayout& l : testing::kFourRankLayouts) {
    const std::vector<int> codes =
        RunRanks("TrainSessionInitFromRank.FirstLoss", 4,
                 {std::string("KP_TEST_LAYOUT=") + l.name, "KP_TEST_WANT=" + want.str(), "KP_TEST_DIR=" + c.init_from});
    EXPECT_EQ(codes, std::vector<int>(4, 0)) << l.name;
  }
}

TEST(TrainSessionInitFromRank, FirstLoss) {
  if (!IsRankProcess()) GTEST_SKIP() << "a rank of TrainSessionInitFrom.ThreeLayoutsOfFourRanksEachStartFromTheWrittenModel";
  const std::string name = std::getenv("KP_TEST_LAYOUT");
  const double want = std::atof(std::getenv("KP_TEST_WANT"));
  const Result<Rendezvous> r = RendezvousFromEnvironment([](const char* n) { return std::getenv(n); });
  ASSERT_TRUE(r.ok()) << r.status().message();
  C10dOptions o;
  o.backend = "gloo";
  TrainConfig c = ScaledK26Config();
  c.init_from = std::getenv("KP_TEST_DIR");
  RealFileSystem fs;
  const ParallelLayout* layout = testing::FourRankLayout(name);
  ASSERT_NE(layout, nullptr) << "unknown layout " << name;
  EXPECT_NEAR(FirstLoss(TrainSession::Create(c, *layout, *r, o, fs)), want, kLossTolerance) << name;
}

TEST(TrainSessionInitFrom, AFolderOfAnotherWidthIsRefusedNamingFileAndTensor) {
  if (IsRankProcess()) GTEST_SKIP();
  RealFileSystem fs;
  TrainConfig c = ScaledK26Config();
  const std::string dir = CheckpointFolder("wide");
  WriteCheckpoint(c, dir);
  TrainConfig wide = c;
  wide.model = ScaledKimiK26Spec(256);
  wide.init_from = dir;
  // The folder's config.json (SaveHfCheckpoint writes one) is read first.
  const auto s = TrainSession::Create(wide, fs);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "--init-from: " + dir +
                                      "/config.json: the checkpoint's architecture is not the model's (hidden: 224 vs "
                                      "256; checkpoint vs model)");
  // Without it, the tensors' shapes: the first that differs, with its file.
  std::filesystem::remove(dir + "/config.json");
  const auto t = TrainSession::Create(wide, fs);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message().rfind("--init-from: " + dir + "/model.safetensors: tensor model.", 0), 0u)
      << t.status().message();
  wide.resume = "x.pt";
  EXPECT_NE(TrainSession::Create(wide, fs).status().message().find("--init-from: not with --resume"), std::string::npos);
}

}  // namespace
}  // namespace kp::runtime
