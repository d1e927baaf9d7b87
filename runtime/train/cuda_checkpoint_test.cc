// Real weights on a GPU (issue 33): a scaled Kimi K2.6 trained on CUDA saves
// the layout-free checkpoint at step 3 and, resumed from it on CUDA, repeats
// the uninterrupted steps 4-6; LoRA on the INT4 base, started from a released
// INT4 checkpoint (--init-from), does the same, and its first loss is the
// written model's computed on the CPU apart from the session. Skipped without
// a GPU; on the GPU machine it runs in kp_kernel_tests (scripts/gpu_build.sh).
#include <gtest/gtest.h>

#include <filesystem>

#include "runtime/model/hf_checkpoint.h"
#include "runtime/model/test_util.h"
#include "runtime/train/train_session.h"
#include "runtime/train/trainer_internal.h"

namespace kp::runtime {
namespace {

constexpr int kSaveAt = 3, kSteps = 6;

TrainConfig CudaConfig() {
  TrainConfig c;
  c.model = ScaledKimiK26Spec(224);
  c.batch = 4;
  c.seq_len = 8;
  c.steps = kSteps;
  c.warmup = 1;
  c.seed = 5;
  c.device = "cuda";
  return c;
}

std::string Folder(const std::string& name) {
  const std::string dir = (std::filesystem::temp_directory_path() / ("kp_cuda_checkpoint_" + name)).string();
  std::filesystem::remove_all(dir);
  return dir;
}

// The session's losses up to kSteps, saving at kSaveAt into `save` when given.
std::vector<double> Train(TrainSession& s, const std::string& save) {
  std::vector<double> losses;
  while (s.step() < kSteps) {
    Result<SessionStepMetrics> m = s.Step();
    EXPECT_TRUE(m.ok()) << m.status().message();
    if (!m.ok()) break;
    losses.push_back(m->step.loss);
    if (!save.empty() && s.step() == kSaveAt) {
      const Status saved = s.SaveShards(save);
      EXPECT_TRUE(saved.ok()) << saved.message();
    }
  }
  return losses;
}

// Runs `c` whole with a save at kSaveAt, then resumed from it; the resumed
// steps against the whole run's. The same device, layout and kernels: fp32
// sums in the same order, so the losses agree to the last bit unless a
// kernel's reduction order varies between launches (atomics); 1e-6 bounds that.
void ExpectResumeRepeats(TrainConfig c, const std::string& name) {
  RealFileSystem fs;
  const std::string save = Folder(name);
  auto whole = TrainSession::Create(c, fs);
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  const std::vector<double> want = Train(**whole, save);
  ASSERT_EQ(want.size(), std::size_t{kSteps});
  c.resume = save;
  c.init_from.clear();
  auto resumed = TrainSession::Create(c, fs);
  ASSERT_TRUE(resumed.ok()) << resumed.status().message();
  ASSERT_EQ((*resumed)->step(), kSaveAt);
  const std::vector<double> got = Train(**resumed, "");
  ASSERT_EQ(got.size(), std::size_t{kSteps - kSaveAt});
  for (int i = 0; i < kSteps - kSaveAt; ++i) {
    EXPECT_NEAR(got[i], want[kSaveAt + i], 1e-6) << name << ", step " << kSaveAt + i + 1;
    if (got[i] != want[kSaveAt + i]) std::printf("%s step %d: not bitwise, %.3g apart\n", name.c_str(),
                                                 kSaveAt + i + 1, got[i] - want[kSaveAt + i]);
  }
}

TEST(CudaCheckpoint, SavedAndResumedOnTheGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  ExpectResumeRepeats(CudaConfig(), "fp32");
}

TEST(CudaCheckpoint, LoraOnTheInt4BaseFromAReleasedCheckpoint) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  TrainConfig c = CudaConfig();
  c.lora = LoraOptions{4, 8.0};
  c.options.int4_expert_base = true;
  c.init_from = Folder("released");
  RealFileSystem fs;
  {
    ModelOptions o;
    o.seed = 11;
    auto written = BuildModel(c.model, o).value();
    ASSERT_TRUE(SaveHfCheckpoint(*written, fs, c.init_from, /*int4_experts=*/true).ok());
  }
  // The written model's first loss on the CPU, dequantized by weights/int4.h.
  double want = 0;
  {
    ModelOptions o;
    o.seed = 99;
    auto model = BuildModel(c.model, o).value();
    const Result<CheckpointDir> dir = CheckpointDir::Open(fs, c.init_from);
    ASSERT_TRUE(dir.ok());
    ASSERT_TRUE(LoadHfCheckpoint(*model, *dir).ok());
    const std::vector<std::int64_t> tokens = OpenTokenSource(c, fs).value()->Batch(0, c.batch, c.seq_len + 1);
    const torch::Tensor rows = torch::tensor(tokens, torch::kLong).reshape({c.batch, c.seq_len + 1});
    torch::NoGradGuard no_grad;
    want = LanguageModelLoss(model->forward(rows.narrow(1, 0, c.seq_len)), rows.narrow(1, 1, c.seq_len)).item<double>();
  }
  auto first = TrainSession::Create(c, fs);
  ASSERT_TRUE(first.ok()) << first.status().message();
  Result<SessionStepMetrics> m = (*first)->Step();
  ASSERT_TRUE(m.ok()) << m.status().message();
  // The GPU's fp32 products against the CPU's: other kernels, other orders.
  EXPECT_NEAR(m->step.loss, want, 1e-5 * std::abs(want));
  ExpectResumeRepeats(c, "lora_int4");
}

}  // namespace
}  // namespace kp::runtime
