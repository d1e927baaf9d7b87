#include "specs/presets.h"

#include <gtest/gtest.h>

namespace kp {
namespace {

TEST(PresetsTest, EveryShippedPresetParses) {
  RealFileSystem fs;
  PresetCatalog c(fs, DefaultPresetDir());
  for (const std::string& n : c.Names("models")) EXPECT_TRUE(c.Model(n).ok()) << n << ": " << c.Model(n).status().message();
  for (const std::string& n : c.Names("gpus")) EXPECT_TRUE(c.Gpu(n).ok()) << n;
  for (const std::string& n : c.Names("topologies")) EXPECT_TRUE(c.Topology(n).ok()) << n;
  EXPECT_EQ(c.Names("models"), (std::vector<std::string>{"deepseek-v3", "kimi-k2.6", "kimi-k3", "kimi-k3-debug",
                                                               "qwen3-235b-a22b", "qwen3-30b-a3b"}));
  EXPECT_EQ(c.Names("gpus"), (std::vector<std::string>{"a100-80g", "b200", "b300", "gb200", "gb300", "h100", "h200"}));
  EXPECT_EQ(c.Names("topologies"), (std::vector<std::string>{"b200-full", "h200-full", "h200-lora"}));
}

TEST(PresetsTest, SeedTopologiesCarryTheSeedTable) {
  RealFileSystem fs;
  PresetCatalog c(fs, DefaultPresetDir());
  auto full = c.Topology("h200-full");
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->nodes * full->gpus_per_node, 128);
  EXPECT_EQ(full->actor_tp, 8);
  EXPECT_EQ(full->actor_pp, 2);
  EXPECT_EQ(full->actor_ep, 8);
  auto lora = c.Topology("h200-lora");
  ASSERT_TRUE(lora.ok());
  EXPECT_EQ(lora->nodes * lora->gpus_per_node, 16);
  EXPECT_EQ(lora->mode, "lora");
  EXPECT_EQ(lora->lora_rank, 32);
  EXPECT_EQ(lora->actor_tp, 4);
  EXPECT_EQ(lora->rollout_tp, 8);
  auto b200 = c.Topology("b200-full");
  ASSERT_TRUE(b200.ok());
  EXPECT_EQ(b200->nodes * b200->gpus_per_node, 64);
  EXPECT_EQ(b200->actor_pp, 1);
}

TEST(PresetsTest, H200FrontEndAndRdmaReproduceTheSeedRates) {
  RealFileSystem fs;
  auto g = PresetCatalog(fs, DefaultPresetDir()).Gpu("h200");
  ASSERT_TRUE(g.ok());
  EXPECT_DOUBLE_EQ(g->node_rdma().value(), 400e9);     // 8 x 400 Gb/s
  EXPECT_DOUBLE_EQ(g->frontend.value(), 50e9 / 8);     // 50 Gb/s
}

const char* kGpu = R"({"name": "x", "memory_gb": 80, "bf16_tflops": 1, "fp16_tflops": 1, "fp8_tflops": 0,
  "hbm_gbytes_per_s": 1, "nvlink_gbytes_per_s": 1, "gpus_per_node": 8, "nics_per_node": 8,
  "nic_gbits_per_s": 400, "frontend_gbits_per_s": 50, "source": "test"})";

TEST(PresetsTest, MalformedFilesNameTheProblem) {
  EXPECT_EQ(ParseGpuSpec("{").status().message(), "not valid JSON");
  EXPECT_EQ(ParseGpuSpec("[1]").status().message(), "the top level must be a JSON object");
  EXPECT_TRUE(ParseGpuSpec(kGpu).ok());
  std::string missing = kGpu;
  missing.replace(missing.find("\"memory_gb\": 80, "), 17, "");
  EXPECT_EQ(ParseGpuSpec(missing).status().message(), "memory_gb: required field is missing");
  std::string typo = kGpu;
  typo.replace(typo.find("\"source\""), 8, "\"sourse\"");
  EXPECT_EQ(ParseGpuSpec(typo).status().message(), "source: required field is missing");
  std::string extra = std::string(kGpu).insert(1, "\"colour\": 1, ");
  EXPECT_EQ(ParseGpuSpec(extra).status().message(), "colour: unknown field");
  std::string wrong = kGpu;
  wrong.replace(wrong.find("80"), 2, "\"80\"");
  EXPECT_EQ(ParseGpuSpec(wrong).status().message(), "memory_gb: must be a number");
  std::string zero = kGpu;
  zero.replace(zero.find("80"), 2, "0");
  EXPECT_EQ(ParseGpuSpec(zero).status().message(), "memory_gb: must be > 0, got 0.000000");
}

TEST(PresetsTest, NestedFieldsAreNamedWithTheirPath) {
  const char* model = R"({"name": "m", "layers": 2, "hidden": 8, "heads": 2, "vocab": 10, "dense_ffn": 16,
    "attention": {"pattern": ["mla"]},
    "mla": {"q_lora_rank": 0, "kv_lora_rank": 4, "qk_nope_head_dim": 2, "qk_rope_head_dim": 2, "v_head_dim": 2},
    "moe": {"num_experts": 4, "top_k": 2, "expert_ffn": 8, "shard": 1}})";
  EXPECT_EQ(ParseModelSpec(model).status().message(), "moe.shard: unknown field");
  const char* bad_kind = R"({"name": "m", "layers": 2, "hidden": 8, "heads": 2, "vocab": 10, "dense_ffn": 16,
    "attention": {"pattern": ["gqa"]}})";
  EXPECT_EQ(ParseModelSpec(bad_kind).status().message(),
            "attention.pattern: entries must be \"mha\", \"mla\" or \"kda\"");
}

TEST(PresetsTest, UnknownPresetListsTheKnownOnes) {
  FakeFileSystem fs;
  fs.Add("p/gpus/h200.json", kGpu);
  PresetCatalog c(fs, "p");
  auto g = c.Gpu("h300");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), Status::Code::kNotFound);
  EXPECT_EQ(g.status().message(), "--gpu: unknown preset \"h300\" (known: h200)");
  EXPECT_TRUE(c.Gpu("h200").ok());
}

TEST(PresetsTest, SpecsRoundTripThroughJson) {
  RealFileSystem fs;
  PresetCatalog c(fs, DefaultPresetDir());
  for (const std::string& n : c.Names("models")) {
    auto m = c.Model(n);
    ASSERT_TRUE(m.ok());
    auto back = ParseModelSpec(ModelSpecToJson(*m));
    ASSERT_TRUE(back.ok()) << n << ": " << back.status().message();
    EXPECT_EQ(ModelSpecToJson(*back), ModelSpecToJson(*m));
    EXPECT_EQ(back->attention, m->attention);
    EXPECT_EQ(back->moe.latent_dim, m->moe.latent_dim);
  }
  for (const std::string& n : c.Names("gpus")) {
    auto g = c.Gpu(n);
    auto back = ParseGpuSpec(GpuSpecToJson(*g));
    ASSERT_TRUE(back.ok()) << n;
    EXPECT_DOUBLE_EQ(back->nic.value(), g->nic.value());
    EXPECT_DOUBLE_EQ(back->memory.value(), g->memory.value());
  }
}

}  // namespace
}  // namespace kp
