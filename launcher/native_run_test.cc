#include "launcher/native_run.h"

#include <gtest/gtest.h>

#include "planner/test_util.h"

namespace kp {
namespace {

PlanRequest Executable() {
  PlanRequest r = testing::SeedRequest("kimi-k3-debug", "h100", 1);
  r.plan = ParallelPlan{1, 2, 1, 1, 1, 1, 4, 1, 1, 1};
  r.distributed_optimizer = false;
  r.state_precision = StatePrecision::kFp32;
  r.recompute = Recompute::kNone;
  return r;
}

// Whole layers: none, full as every layer (uniform 1), as groups of N
// (uniform N) or as each stage's first N (block N); Megatron's default
// selective under flash attention, which the planner prices as none; the
// modules, those that keep their input and those that drop their output.
TEST(NativeRun, CheckpointingOfEachRecomputeSetting) {
  PlanRequest r = Executable();
  EXPECT_EQ(*CheckpointingOf(r), (LayerCheckpointing{false, 0}));
  r.recompute = Recompute::kSelective;
  EXPECT_EQ(*CheckpointingOf(r), (LayerCheckpointing{false, 0}));
  r.recompute = Recompute::kFull;
  EXPECT_EQ(*CheckpointingOf(r), (LayerCheckpointing{true, 0}));
  r.recompute_method = RecomputeMethod::kBlock;
  r.recompute_layers = 3;
  EXPECT_EQ(*CheckpointingOf(r), (LayerCheckpointing{true, 3}));
  r.recompute_method = RecomputeMethod::kUniform;
  LayerCheckpointing groups{true, 0};
  groups.group_layers = 3;
  EXPECT_EQ(*CheckpointingOf(r), groups);
  r.recompute = Recompute::kSelective;
  r.recipe.recompute_modules = {RecomputeModule::kSharedExperts, RecomputeModule::kMoe};
  LayerCheckpointing modules;
  modules.shared_experts = modules.moe = true;
  EXPECT_EQ(*CheckpointingOf(r), modules);
  r.recipe.recompute_modules = {RecomputeModule::kCoreAttn, RecomputeModule::kMoeAct, RecomputeModule::kLayernorm,
                                RecomputeModule::kMlaUpProj};
  LayerCheckpointing without_output;
  without_output.moe_act = without_output.layernorm = without_output.mla_up_proj = true;
  EXPECT_EQ(*CheckpointingOf(r), without_output);
  r.recipe.recompute_modules = {RecomputeModule::kCoreAttn};
  r.flash_attention = false;
  EXPECT_EQ(CheckpointingOf(r).status().message().rfind("--recompute: ", 0), 0u);
}

// Each setting the runtime does not execute is refused by its flag.
TEST(NativeRun, RefusesEachSettingItDoesNotExecuteByItsFlag) {
  EXPECT_TRUE(CheckNativeExecutes(Executable()).ok());
  struct Case {
    const char* flag;
    void (*change)(PlanRequest&);
  };
  const Case cases[] = {
      {"--dtype", [](PlanRequest& r) { r.recipe.fp8 = Fp8Recipe::kBlockwise; }},
      {"--dtype", [](PlanRequest& r) { r.bf16 = false; }},
      {"--placement", [](PlanRequest& r) { r.placement = Placement::kSplit; }},
      {"--model", [](PlanRequest& r) { r.model.mtp_layers = 1; }},
      {"--lora-experts", [](PlanRequest& r) { r.mode = TrainMode::kLora; r.lora.experts = LoraExperts::kPerExpert; }},
      {"--lora-targets", [](PlanRequest& r) { r.mode = TrainMode::kLora; r.lora.dense_ffn = true; }},
      {"--lora-native-base", [](PlanRequest& r) {
         r.mode = TrainMode::kLora;
         r.lora.native_base = true;
         r.model.storage.routed_expert_bits = 8;
       }},
      {"--recompute", [](PlanRequest& r) {
         r.recompute = Recompute::kSelective;
         r.flash_attention = false;
       }},
  };
  for (const Case& c : cases) {
    PlanRequest r = Executable();
    c.change(r);
    const Status s = CheckNativeExecutes(r);
    EXPECT_EQ(s.message().rfind(std::string(c.flag) + ": kimi-plan run does not execute ", 0), 0u) << s.message();
  }
  // An INT4 base in groups of 32 runs (runtime/model/int4_linear.h).
  PlanRequest int4 = Executable();
  int4.mode = TrainMode::kLora;
  int4.lora.native_base = true;
  int4.model.storage.routed_expert_bits = 4;
  EXPECT_TRUE(CheckNativeExecutes(int4).ok()) << CheckNativeExecutes(int4).message();
  // The distributed optimizer runs (distributed_optimizer.h), and so do
  // Megatron's mixed-precision states.
  PlanRequest sharded = Executable();
  sharded.distributed_optimizer = true;
  sharded.state_precision = StatePrecision::kMixed;
  EXPECT_TRUE(CheckNativeExecutes(sharded).ok());
  // LoRA keeps its frozen base, whatever the full fine-tune's states.
  PlanRequest lora = Executable();
  lora.mode = TrainMode::kLora;
  lora.state_precision = StatePrecision::kMixed;
  EXPECT_TRUE(CheckNativeExecutes(lora).ok());
}

}  // namespace
}  // namespace kp
