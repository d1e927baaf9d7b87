// Training end to end on CPU: the loss falls on the synthetic corpus, a
// resumed run repeats the uninterrupted one exactly, and bad input (a token
// file that is missing or truncated, a checkpoint of another shape) is a
// one-line error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "runtime/train/data.h"
#include "runtime/model/test_util.h"
#include "runtime/train/train_session.h"

namespace kp::runtime {
namespace {

TrainConfig TinyConfig() {
  TrainConfig c;
  c.model = TinyKimiSpec();
  c.batch = 4;
  c.seq_len = 16;
  c.steps = 6;
  c.warmup = 2;
  c.lr = 1e-2;
  c.seed = 5;
  return c;
}

// Long enough for the loss to fall clearly.
TrainConfig SixtyStepConfig() {
  TrainConfig c = TinyConfig();
  c.steps = 60;
  c.batch = 8;
  return c;
}

std::vector<double> Train(const TrainConfig& c, int steps, const FileSystem& fs,
                          std::unique_ptr<TrainSession>* keep = nullptr) {
  auto s = TrainSession::Create(c, fs);
  EXPECT_TRUE(s.ok()) << s.status().message();
  if (!s.ok()) return {};
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    auto m = (*s)->Step();
    EXPECT_TRUE(m.ok()) << m.status().message();
    if (!m.ok()) break;
    losses.push_back(m->step.loss);
  }
  if (keep) *keep = std::move(s).value();
  return losses;
}

TEST(TrainerTest, LossFallsClearlyOnTheSyntheticCorpus) {
  RealFileSystem fs;
  TrainConfig c = SixtyStepConfig();
  const std::vector<double> losses = Train(c, c.steps, fs);
  ASSERT_EQ(losses.size(), 60u);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += losses[i] / 5;
  for (int i = 55; i < 60; ++i) last += losses[i] / 5;
  // A uniform guess costs ln(48) = 3.87 nats, the chain's floor is 0.92.
  EXPECT_GT(first, 3.5);
  EXPECT_LT(last, first - 1.0) << "first " << first << " last " << last;
}

TEST(TrainerTest, ResumeRepeatsTheUninterruptedRunExactlyInFp32) {
  RealFileSystem fs;
  TrainConfig c = TinyConfig();
  c.options.activation_checkpointing = true;  // and the recomputation path with it
  const std::vector<double> straight = Train(c, 6, fs);
  std::unique_ptr<TrainSession> first_half;
  const std::vector<double> head = Train(c, 3, fs, &first_half);
  const std::string path = ::testing::TempDir() + "/resume.pt";
  ASSERT_TRUE(first_half->SaveCheckpoint(path).ok());
  TrainConfig resumed = c;
  resumed.resume = path;
  std::unique_ptr<TrainSession> second_half;
  const std::vector<double> tail = Train(resumed, 3, fs, &second_half);
  EXPECT_EQ(second_half->step(), 6);
  ASSERT_EQ(straight.size(), 6u);
  ASSERT_EQ(tail.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(head[i], straight[i]) << "step " << i + 1;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(tail[i], straight[3 + i]) << "step " << i + 4;
  std::remove(path.c_str());
}

TEST(TrainerTest, ACheckpointOfAnotherShapeIsRefused) {
  RealFileSystem fs;
  std::unique_ptr<TrainSession> s;
  Train(TinyConfig(), 1, fs, &s);
  const std::string path = ::testing::TempDir() + "/shape.pt";
  ASSERT_TRUE(s->SaveCheckpoint(path).ok());
  TrainConfig other = TinyConfig();
  other.model.moe.num_experts = 6;
  other.resume = path;
  auto r = TrainSession::Create(other, fs);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("moe.num_experts: 4 vs 6"), std::string::npos) << r.status().message();
  other = TinyConfig();
  other.resume = path + ".missing";
  EXPECT_EQ(TrainSession::Create(other, fs).status().code(), Status::Code::kNotFound);
  std::remove(path.c_str());
}

TEST(TrainerTest, LoraAndBf16Train) {
  RealFileSystem fs;
  TrainConfig c = TinyConfig();
  c.lora = LoraOptions{4, 8.0, LoraExperts::kPerExpert};
  c.options.dtype = DType::kBf16;
  std::unique_ptr<TrainSession> s;
  const std::vector<double> losses = Train(c, 3, fs, &s);
  ASSERT_EQ(losses.size(), 3u);
  for (double l : losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(s->trainable_count(), s->parameter_count() / 4);
  const std::string path = ::testing::TempDir() + "/lora.pt";
  EXPECT_TRUE(s->SaveAdapters(path).ok());
  std::remove(path.c_str());
}

// The routed experts in FP8 (DeepSeek-V3's blockwise recipe) train as the
// fp32 run does: the curve falls as far, and the last steps' mean stays
// within 0.05 nats of fp32's (measured: 0.003).
TEST(TrainerTest, Fp8ExpertsFollowTheFullPrecisionCurve) {
  RealFileSystem fs;
  TrainConfig c = SixtyStepConfig();
  const std::vector<double> full = Train(c, c.steps, fs);
  c.options.fp8_experts = true;
  ASSERT_TRUE(ValidateTrainConfig(c).ok());
  const std::vector<double> fp8 = Train(c, c.steps, fs);
  ASSERT_EQ(fp8.size(), full.size());
  // The experts' down and the latent up projections start at zero (init.h),
  // so the first losses are the same; once both have moved, the quantised
  // products move the curve.
  EXPECT_EQ(fp8[0], full[0]);
  EXPECT_NE(fp8, full);
  double last_full = 0, last_fp8 = 0;
  for (int i = 55; i < 60; ++i) last_full += full[i] / 5, last_fp8 += fp8[i] / 5;
  EXPECT_LT(last_fp8, fp8[0] - 1.0);
  EXPECT_NEAR(last_fp8, last_full, 0.05);
}

TEST(TrainerTest, Fp8ExpertsAreRefusedWithoutTrainedRoutedExperts) {
  TrainConfig c = TinyConfig();
  c.options.fp8_experts = true;
  c.lora = LoraOptions{4, 8.0, LoraExperts::kPerExpert};
  c.options.int4_expert_base = true;
  EXPECT_EQ(ValidateTrainConfig(c).message(), "--fp8: the experts' base is INT4 (--lora-native-base); FP8 products "
                                              "are for trained experts (give one of them)");
  c = TinyConfig();
  c.options.fp8_experts = true;
  c.model.moe.num_experts = 0;
  EXPECT_NE(ValidateTrainConfig(c).message().find("--fp8: experts puts the routed experts in FP8"), std::string::npos);
}

// ------------------------------------------------------------------ data

std::string Uint16s(const std::vector<int>& v) {
  std::string s;
  for (int x : v) {
    s.push_back(static_cast<char>(x & 0xff));
    s.push_back(static_cast<char>(x >> 8));
  }
  return s;
}

TEST(DataTest, TheSyntheticCorpusFollowsItsChainAndDependsOnlyOnTheStep) {
  SyntheticCorpus corpus(50, 1);
  const auto a = corpus.Batch(7, 3, 20), b = corpus.Batch(7, 3, 20), c = corpus.Batch(8, 3, 20);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (int r = 0; r < 3; ++r)
    for (int t = 1; t < 20; ++t) {
      const std::int64_t prev = a[r * 20 + t - 1], next = a[r * 20 + t];
      bool successor = false;
      for (int i = 0; i < SyntheticCorpus::kSuccessors; ++i) successor |= corpus.Successor(prev, i) == next;
      EXPECT_TRUE(successor);
    }
  EXPECT_NEAR(SyntheticCorpus::EntropyRate(), 0.9149, 1e-3);
}

TEST(DataTest, ATokenFileIsReadLittleEndianAndWindowed) {
  FakeFileSystem fs;
  std::vector<int> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back((i * 7) % 300);
  fs.Add("/data/train.bin", Uint16s(tokens));
  auto f = TokenFile::Open(fs, "/data/train.bin", 2, 300, 9, 3);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ((*f)->size(), 40);
  const auto batch = (*f)->Batch(0, 2, 9);
  for (int r = 0; r < 2; ++r) {
    const std::int64_t start = batch[r * 9];
    int offset = 0;
    while (tokens[offset] != start) ++offset;
    for (int t = 0; t < 9; ++t) EXPECT_EQ(batch[r * 9 + t], tokens[offset + t]);
  }
}

TEST(DataTest, BadTokenFilesAreOneLineErrors) {
  FakeFileSystem fs;
  fs.Add("/odd.bin", std::string("\x01\x00\x02", 3));
  fs.Add("/short.bin", Uint16s({1, 2, 3}));
  fs.Add("/big.bin", Uint16s(std::vector<int>(20, 60000)));
  auto missing = TokenFile::Open(fs, "/nope.bin", 2, 100, 9, 0);
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
  auto odd = TokenFile::Open(fs, "/odd.bin", 2, 100, 1, 0);
  EXPECT_NE(odd.status().message().find("truncated"), std::string::npos);
  auto short_file = TokenFile::Open(fs, "/short.bin", 2, 100, 9, 0);
  EXPECT_NE(short_file.status().message().find("fewer than one 9-token"), std::string::npos);
  auto big = TokenFile::Open(fs, "/big.bin", 2, 100, 9, 0);
  EXPECT_NE(big.status().message().find("outside the model's vocabulary of 100"), std::string::npos);
  for (const Status& s : {missing.status(), odd.status(), short_file.status(), big.status()})
    EXPECT_EQ(s.message().find('\n'), std::string::npos);
  TrainConfig c = TinyConfig();
  c.data.source = "/odd.bin";
  EXPECT_EQ(TrainSession::Create(c, fs).status().code(), Status::Code::kInvalidArgument);
}

}  // namespace

TEST(TrainerTest, EachRankOfARunHasItsOwnCheckpointFile) {
  EXPECT_EQ(RankCheckpointPath("ckpt/step-8.pt", 0, 1), "ckpt/step-8.pt");
  EXPECT_EQ(RankCheckpointPath("ckpt/step-8.pt", 0, 4), "ckpt/step-8-rank-0.pt");
  EXPECT_EQ(RankCheckpointPath("ckpt/step-8.pt", 3, 4), "ckpt/step-8-rank-3.pt");
  EXPECT_EQ(RankCheckpointPath("ckpt/last", 1, 2), "ckpt/last-rank-1");
}

}  // namespace kp::runtime
