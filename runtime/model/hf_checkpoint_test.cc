#include "runtime/model/hf_checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "runtime/model/int4_linear.h"
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

// An INT4 base (LoRA's frozen experts, ExpertBankImpl::QuantizeBase) takes
// a released INT4 checkpoint's bytes as they are, and quantises a bf16 /
// fp32 one as QuantizeBase would have; written back, its bytes are the same.
std::shared_ptr<StageModelImpl> OnInt4Base(std::uint64_t seed) {
  auto m = ScaledK26(seed, 224);
  m->EnableLora(LoraOptions{4, 8.0}, seed);
  EXPECT_TRUE(m->QuantizeExpertBase().ok());
  return m;
}

std::string FileBytes(const CheckpointDir& c, const std::string& name) {
  const auto found = c.Find(name);
  EXPECT_TRUE(found.ok()) << name;
  return found.ok() ? std::string(found->first->Bytes(*found->second)) : "";
}

std::string TensorBytes(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

TEST(HfCheckpointTest, AnInt4BaseTakesTheReleasedBytesAsTheyAre) {
  RealFileSystem fs;
  auto a = ScaledK26(1, 224), b = OnInt4Base(2);
  const std::string dir = Dir("kp_hf_checkpoint_int4_base");
  ASSERT_TRUE(SaveHfCheckpoint(*a, fs, dir, /*int4_experts=*/true).ok());
  Result<CheckpointDir> c = CheckpointDir::Open(fs, dir);
  ASSERT_TRUE(c.ok());
  const Status loaded = LoadHfCheckpoint(*b, *c);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  const auto got = Tensors(*b);
  const torch::Tensor packed = got.at("layers.1.moe.experts.down_packed"), scale = got.at("layers.1.moe.experts.down_scale");
  ASSERT_EQ(packed.scalar_type(), torch::kInt);
  for (int e = 0; e < packed.size(0); ++e) {
    const std::string name = "model.layers.1.mlp.experts." + std::to_string(e) + ".down_proj.weight";
    EXPECT_EQ(TensorBytes(packed[e]), FileBytes(*c, name + "_packed")) << e;
    EXPECT_EQ(TensorBytes(scale[e]), FileBytes(*c, name + "_scale")) << e;
  }
  EXPECT_TRUE(torch::equal(got.at("layers.1.attention.q_a.weight"), Tensors(*a).at("layers.1.attention.q_a.weight")));
  // Written back: the same bytes, and a config that declares them.
  const std::string again = Dir("kp_hf_checkpoint_int4_base_again");
  ASSERT_TRUE(SaveHfCheckpoint(*b, fs, again, /*int4_experts=*/false).ok());
  Result<CheckpointDir> c2 = CheckpointDir::Open(fs, again);
  ASSERT_TRUE(c2.ok());
  const std::string name = "model.layers.1.mlp.experts.3.up_proj.weight";
  for (const char* part : {"_packed", "_scale", "_shape"})
    EXPECT_EQ(FileBytes(*c2, name + part), FileBytes(*c, name + part)) << part;
  EXPECT_NE(fs.ReadFile(again + "/config.json", 1 << 20)->find("\"pack-quantized\""), std::string::npos);
}

TEST(HfCheckpointTest, AnInt4BaseQuantisesReleasedFloatExpertsAsQuantizeBaseWould) {
  RealFileSystem fs;
  auto a = ScaledK26(1, 224), b = OnInt4Base(2);
  const std::string dir = Dir("kp_hf_checkpoint_float_to_int4_base");
  ASSERT_TRUE(SaveHfCheckpoint(*a, fs, dir, /*int4_experts=*/false).ok());
  Result<CheckpointDir> c = CheckpointDir::Open(fs, dir);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(LoadHfCheckpoint(*b, *c).ok());
  const auto want = Tensors(*a), got = Tensors(*b);
  for (const char* m : {"gate", "up", "down"}) {
    const std::string bank = std::string("layers.2.moe.experts.") + m;
    const Int4Weight q = QuantizeInt4Weight(want.at(bank));
    EXPECT_TRUE(torch::equal(got.at(bank + "_packed"), q.packed)) << bank;
    EXPECT_TRUE(torch::equal(got.at(bank + "_scale"), q.scales)) << bank;
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
