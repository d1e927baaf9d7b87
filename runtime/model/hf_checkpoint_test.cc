#include "runtime/model/hf_checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "runtime/model/test_util.h"
#include "weights/int4.h"

namespace kp::runtime {
namespace {

std::shared_ptr<StageModelImpl> ScaledK26(std::uint64_t seed, int hidden = 64) {
  ModelOptions options;
  options.seed = seed;
  return BuildModel(ScaledKimiK26Spec(hidden), options).value();
}

std::map<std::string, torch::Tensor> Tensors(StageModelImpl& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : m.named_parameters()) out[p.key()] = p.value().detach().clone();
  for (const auto& b : m.named_buffers()) out[b.key()] = b.value().detach().clone();
  return out;
}

std::string Dir(const std::string& name) {
  RealFileSystem fs;
  const std::string dir = fs.TempPath(name);
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(HfCheckpointTest, SavedInTheReleasedLayoutAndLoadedBackBitForBit) {
  RealFileSystem fs;
  auto a = ScaledK26(1), b = ScaledK26(2);
  {
    torch::NoGradGuard no_grad;  // a router bias that is not zero
    for (auto& buf : a->named_buffers())
      if (buf.key().find("router.bias") != std::string::npos) buf.value().copy_(torch::linspace(-0.1, 0.1, 4));
  }
  const std::string dir = Dir("kp_hf_checkpoint_f32");
  ASSERT_TRUE(SaveHfCheckpoint(*a, fs, dir, /*int4_experts=*/false).ok());
  Result<CheckpointDir> c = CheckpointDir::Open(fs, dir);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->Find("model.layers.2.mlp.experts.3.down_proj.weight").ok());
  ASSERT_NE(Tensors(*a).at("layers.0.attention.q_a.weight").sum().item<double>(),
            Tensors(*b).at("layers.0.attention.q_a.weight").sum().item<double>());
  const Status loaded = LoadHfCheckpoint(*b, *c);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  const auto want = Tensors(*a), got = Tensors(*b);
  for (const auto& [name, t] : want) {
    if (name.find(".load") != std::string::npos) continue;  // the routers' load counters are not weights
    EXPECT_TRUE(torch::equal(got.at(name), t)) << name;
  }
}

TEST(HfCheckpointTest, Int4ExpertsLoadAsTheirDequantizedValuesWithinTheStatedBound) {
  RealFileSystem fs;
  // Hidden 224 scales K2.6's expert FFN (2048 of 7168) to 64: whole groups of 32.
  auto a = ScaledK26(1, 224), b = ScaledK26(2, 224);
  const std::string dir = Dir("kp_hf_checkpoint_int4");
  const Status saved = SaveHfCheckpoint(*a, fs, dir, /*int4_experts=*/true);
  ASSERT_TRUE(saved.ok()) << saved.message();
  Result<CheckpointDir> c = CheckpointDir::Open(fs, dir);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->Find("model.layers.1.mlp.experts.0.gate_proj.weight_packed").ok());
  EXPECT_FALSE(c->Find("model.layers.1.mlp.experts.0.gate_proj.weight").ok());
  ASSERT_TRUE(LoadHfCheckpoint(*b, *c).ok());
  const auto want = Tensors(*a), got = Tensors(*b);
  for (const auto& [name, t] : want) {
    if (name.find(".load") != std::string::npos) continue;
    if (name.find(".moe.experts.") == std::string::npos) {
      EXPECT_TRUE(torch::equal(got.at(name), t)) << name;
      continue;
    }
    // Per group of 32 along a row: within s (1/2 + 7.5 x 2^-8), s = bf16(max / 7.5) <= max / 7.5 x (1 + 2^-8).
    const torch::Tensor groups = t.reshape({-1, kInt4Group}), diff = (got.at(name).reshape({-1, kInt4Group}) - groups).abs();
    const torch::Tensor bound = groups.abs().amax(1, true) / 7.5 * (1 + 1.0 / 256) * (0.5 + 7.5 / 256);
    EXPECT_TRUE((diff <= bound + 1e-12).all().item<bool>()) << name;
    EXPECT_FALSE(torch::equal(got.at(name), t)) << name << " was not quantized";
  }
}

TEST(HfCheckpointTest, RefusesATensorOfAnotherShapeNamingFileAndTensorAndChangesNothing) {
  RealFileSystem fs;
  auto a = ScaledK26(1, 64), wide = ScaledK26(2, 96);
  const std::string dir = Dir("kp_hf_checkpoint_shape");
  ASSERT_TRUE(SaveHfCheckpoint(*a, fs, dir, false).ok());
  Result<CheckpointDir> c = CheckpointDir::Open(fs, dir);
  ASSERT_TRUE(c.ok());
  const auto before = Tensors(*wide);
  const Status s = LoadHfCheckpoint(*wide, *c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir + "/model.safetensors: tensor "), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(": shape ["), std::string::npos) << s.message();
  for (const auto& [name, t] : Tensors(*wide)) EXPECT_TRUE(torch::equal(t, before.at(name))) << name;
}

}  // namespace
}  // namespace kp::runtime
