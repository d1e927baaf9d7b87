#include "weights/hf_export.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>

#include "weights/checkpoint_dir.h"
#include "weights/int4.h"

namespace kp {
namespace {

std::int64_t Elements(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

template <typename T>
std::string BytesOf(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// A save of one rank, each tensor whole, in its own folder per test.
struct OneRankSave {
  std::string dir;
  RealFileSystem fs;
  std::deque<std::string> held;
  std::vector<PieceToWrite> pieces;
  OneRankSave() {
    dir = (std::filesystem::temp_directory_path() /
           ("kp_hf_export_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name())))
              .string();
    std::filesystem::remove_all(dir);
  }
  void Add(const std::string& key, TensorDType dtype, const std::vector<std::int64_t>& shape, std::string bytes) {
    held.push_back(std::move(bytes));
    pieces.push_back({key, dtype, PieceBox{shape, std::vector<std::int64_t>(shape.size(), 0), shape, 0,
                                           Elements(shape), 1},
                      held.back()});
  }
  Result<ShardedSave> Commit(const std::string& shape_json) {
    KP_RETURN_IF_ERROR(WriteRankFile(fs, StepFolder(dir, 1) + "/rank-0.safetensors", pieces));
    KP_RETURN_IF_ERROR(CommitSave(fs, dir, SaveManifest{1, 1, "pp 1", shape_json, ""}));
    return ShardedSave::Open(fs, dir);
  }
};

std::vector<float> Ramp(std::int64_t n, double scale, double phase) {
  std::vector<float> v(n);
  for (std::int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * std::sin(0.7 * i + phase));
  return v;
}

std::vector<float> F32(std::string_view bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::vector<float> Bf16(std::string_view bytes) {
  std::vector<float> out(bytes.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::uint16_t b;
    std::memcpy(&b, bytes.data() + 2 * i, 2);
    out[i] = FromBf16(b);
  }
  return out;
}

TEST(HfExportTest, ShardsInBf16) {
  OneRankSave s;
  // w: 24 values, 48 bytes in bf16; b: 3, 6 bytes: a 50-byte bound makes two shards.
  const std::vector<float> w = Ramp(24, 3.0, 0.1), b = {1, 2, 3};
  s.Add("model/w", TensorDType::kF32, {4, 6}, BytesOf(w));
  s.Add("model/b", TensorDType::kF32, {3}, BytesOf(b));
  const Result<ShardedSave> save = s.Commit("{}");
  ASSERT_TRUE(save.ok()) << save.status().message();
  ExportOptions o;
  o.max_shard_bytes = 50;
  const Result<ExportSummary> n = ExportHfFolder(*save, s.fs, s.dir + "/hf", o);
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ(n->tensors, 2);
  EXPECT_FALSE(n->int4_experts);
  EXPECT_TRUE(std::filesystem::exists(s.dir + "/hf/model-00001-of-00002.safetensors"));
  const Result<CheckpointDir> hf = CheckpointDir::Open(s.fs, s.dir + "/hf");
  ASSERT_TRUE(hf.ok()) << hf.status().message();
  const auto got = hf->Find("w");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->second->dtype, TensorDType::kBF16);
  const std::vector<float> values = Bf16(got->first->Bytes(*got->second));
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_EQ(values[i], FromBf16(ToBf16(w[i]))) << i;
}

// An INT4 base is written as saved, bit for bit, with the weight_shape
// compressed-tensors keeps beside each expert.
TEST(HfExportTest, AnInt4BaseIsWrittenAsSavedWithItsWeightShape) {
  OneRankSave s;
  const std::string name = "model.layers.1.mlp.experts.0.gate_proj.weight";
  const Result<PackedInt4> q = QuantizeInt4(Ramp(4 * 64, 0.05, 0.3), 4, 64, name);
  ASSERT_TRUE(q.ok());
  s.Add("model/" + name + "_packed", TensorDType::kI32, {4, 8}, BytesOf(q->packed));
  s.Add("model/" + name + "_scale", TensorDType::kBF16, {4, 2}, BytesOf(q->scales));
  const Result<ShardedSave> save = s.Commit("{}");
  ASSERT_TRUE(save.ok()) << save.status().message();
  const Result<ExportSummary> n = ExportHfFolder(*save, s.fs, s.dir + "/hf", ExportOptions{});
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ(n->tensors, 3);
  EXPECT_TRUE(n->int4_experts);
  const Result<CheckpointDir> hf = CheckpointDir::Open(s.fs, s.dir + "/hf");
  ASSERT_TRUE(hf.ok()) << hf.status().message();
  const auto packed = hf->Find(name + "_packed"), scale = hf->Find(name + "_scale"), shape = hf->Find(name + "_shape");
  ASSERT_TRUE(packed.ok() && scale.ok() && shape.ok());
  EXPECT_EQ(packed->first->Bytes(*packed->second), BytesOf(q->packed));
  EXPECT_EQ(scale->first->Bytes(*scale->second), BytesOf(q->scales));
  EXPECT_EQ(shape->second->dtype, TensorDType::kI32);
  EXPECT_EQ(shape->first->Bytes(*shape->second), BytesOf(std::vector<std::int32_t>{4, 64}));
}

// A projection's fp32 weight and an INT4 expert bank with shared-outer
// adapters (one A for every expert's gate, a B per expert): folded, each
// weight is W + (alpha / rank) B A, computed here in fp64 from the saved
// values; left out, the adapters are counted and nothing else changes.
class AdapterExportTest : public ::testing::Test {
 protected:
  static constexpr int kOut = 3, kIn = 4, kRank = 2, kExperts = 2, kFfn = 4, kHidden = 64;
  static constexpr double kScale = 4.0 / kRank;  // alpha 4
  const std::string q_a = "model.layers.0.self_attn.q_a_proj.weight";
  std::string Expert(int e) { return "model.layers.1.mlp.experts." + std::to_string(e) + ".gate_proj.weight"; }

  void SetUp() override {
    s.Add("model/" + q_a, TensorDType::kF32, {kOut, kIn}, BytesOf(w));
    s.Add("model/layers.0.attention.q_a.lora_a", TensorDType::kF32, {kRank, kIn}, BytesOf(a));
    s.Add("model/layers.0.attention.q_a.lora_b", TensorDType::kF32, {kOut, kRank}, BytesOf(b));
    for (int e = 0; e < kExperts; ++e) {
      const Result<PackedInt4> q =
          QuantizeInt4(Ramp(kFfn * kHidden, 0.05, e), kFfn, kHidden, Expert(e));
      ASSERT_TRUE(q.ok());
      experts.push_back(*q);
      s.Add("model/" + Expert(e) + "_packed", TensorDType::kI32, {kFfn, kHidden / 8}, BytesOf(q->packed));
      s.Add("model/" + Expert(e) + "_scale", TensorDType::kBF16, {kFfn, kHidden / 32}, BytesOf(q->scales));
    }
    s.Add("model/layers.1.moe.experts.gate_lora_a", TensorDType::kF32, {kRank, kHidden}, BytesOf(bank_a));
    s.Add("model/layers.1.moe.experts.gate_lora_b", TensorDType::kF32, {kExperts, kFfn, kRank}, BytesOf(bank_b));
  }

  // W + scale B A in fp64, B [rows, r] and A [r, cols].
  static std::vector<double> Folded(const std::vector<float>& w, const float* b, const float* a, int rows, int cols) {
    std::vector<double> out(w.begin(), w.end());
    for (int o = 0; o < rows; ++o)
      for (int i = 0; i < cols; ++i)
        for (int k = 0; k < kRank; ++k) out[o * cols + i] += kScale * double(b[o * kRank + k]) * a[k * cols + i];
    return out;
  }

  OneRankSave s;
  std::vector<float> w = Ramp(kOut * kIn, 1.0, 0.2), a = Ramp(kRank * kIn, 0.5, 1.1), b = Ramp(kOut * kRank, 0.3, 2.0);
  std::vector<float> bank_a = Ramp(kRank * kHidden, 0.2, 0.4), bank_b = Ramp(kExperts * kFfn * kRank, 0.1, 0.9);
  std::vector<PackedInt4> experts;
};

TEST_F(AdapterExportTest, FoldedIntoTheirWeightsInFp32AndBf16) {
  const Result<ShardedSave> save = s.Commit(R"({"lora": {"rank": 2, "alpha": 4.0, "experts": "shared-outer"}})");
  ASSERT_TRUE(save.ok()) << save.status().message();
  ExportOptions o;
  o.bf16 = false;
  o.merge_lora = true;
  const Result<ExportSummary> n = ExportHfFolder(*save, s.fs, s.dir + "/hf", o);
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ(n->adapters, 4);
  EXPECT_EQ(n->merged, 1 + kExperts);
  EXPECT_EQ(n->tensors, 1 + kExperts);
  EXPECT_FALSE(n->int4_experts);
  const Result<CheckpointDir> hf = CheckpointDir::Open(s.fs, s.dir + "/hf");
  ASSERT_TRUE(hf.ok()) << hf.status().message();
  const auto proj = hf->Find(q_a);
  ASSERT_TRUE(proj.ok());
  EXPECT_EQ(proj->second->dtype, TensorDType::kF32);
  const std::vector<float> got = F32(proj->first->Bytes(*proj->second));
  const std::vector<double> want = Folded(w, b.data(), a.data(), kOut, kIn);
  for (int i = 0; i < kOut * kIn; ++i) EXPECT_NEAR(got[i], want[i], 1e-6 * (1 + std::abs(want[i]))) << i;
  for (int e = 0; e < kExperts; ++e) {
    EXPECT_FALSE(hf->Find(Expert(e) + "_packed").ok());
    const auto merged = hf->Find(Expert(e));
    ASSERT_TRUE(merged.ok()) << Expert(e);
    // An INT4 base folds into bf16: the update would be lost to re-quantisation.
    EXPECT_EQ(merged->second->dtype, TensorDType::kBF16);
    const Result<std::vector<float>> base = DequantizeInt4(experts[e], Expert(e));
    ASSERT_TRUE(base.ok());
    const std::vector<double> ref = Folded(*base, bank_b.data() + e * kFfn * kRank, bank_a.data(), kFfn, kHidden);
    const std::vector<float> values = Bf16(merged->first->Bytes(*merged->second));
    // bf16 keeps 8 significant bits: half an ulp is at most 2^-8 relative.
    for (int i = 0; i < kFfn * kHidden; ++i)
      EXPECT_NEAR(values[i], ref[i], std::ldexp(std::abs(ref[i]), -8) + 1e-7) << Expert(e) << " " << i;
  }
}

TEST_F(AdapterExportTest, LeftOutAndCountedUnlessAsked) {
  const Result<ShardedSave> save = s.Commit(R"({"lora": {"rank": 2, "alpha": 4.0}})");
  ASSERT_TRUE(save.ok()) << save.status().message();
  ExportOptions o;
  o.bf16 = false;
  const Result<ExportSummary> n = ExportHfFolder(*save, s.fs, s.dir + "/hf", o);
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ(n->adapters, 4);
  EXPECT_EQ(n->merged, 0);
  EXPECT_TRUE(n->int4_experts);
  const Result<CheckpointDir> hf = CheckpointDir::Open(s.fs, s.dir + "/hf");
  ASSERT_TRUE(hf.ok());
  EXPECT_EQ(F32(hf->Find(q_a)->first->Bytes(*hf->Find(q_a)->second)), w);
  for (const auto& [name, where] : hf->tensors()) EXPECT_EQ(name.find("lora"), std::string::npos) << name;
}

TEST_F(AdapterExportTest, AnAdapterWithoutItsPairIsRefusedNamingIt) {
  s.pieces.pop_back();  // the bank's lora_b
  const Result<ShardedSave> save = s.Commit(R"({"lora": {"rank": 2, "alpha": 4.0}})");
  ASSERT_TRUE(save.ok()) << save.status().message();
  ExportOptions o;
  o.merge_lora = true;
  const Result<ExportSummary> n = ExportHfFolder(*save, s.fs, s.dir + "/hf", o);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().message(), "model/layers.1.moe.experts.gate_lora_a: its lora_b is not in " + save->folder());
}

}  // namespace
}  // namespace kp
