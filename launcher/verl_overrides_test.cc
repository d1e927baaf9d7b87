#include "launcher/verl_overrides.h"

#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "common/limits.h"
#include "launcher/test_util.h"

namespace kp {
namespace {

using testing::RepoVerlKeys;
using testing::SeedLaunch;

std::map<std::string, std::string> AsMap(const std::vector<VerlOverride>& v) {
  std::map<std::string, std::string> m;
  for (const VerlOverride& o : v) EXPECT_TRUE(m.emplace(o.key, o.value).second) << "emitted twice: " << o.key;
  return m;
}

std::map<std::string, std::string> Overrides(const Launch& l) {
  auto v = VerlOverrides(l, RepoVerlKeys());
  EXPECT_TRUE(v.ok()) << v.status().message();
  return v.ok() ? AsMap(*v) : std::map<std::string, std::string>{};
}

TEST(VerlKeys, TheRepositoryListIsVerlsMegatronTrainerConfig) {
  const VerlKeys keys = RepoVerlKeys();
  EXPECT_GT(keys.size(), 1000u);
  EXPECT_EQ(keys.commit(), "1dda039b9c6311889a9c9a26040677e1254814f9");
  for (const char* k : {"actor_rollout_ref.actor.megatron.expert_tensor_parallel_size",
                        "actor_rollout_ref.rollout.expert_parallel_size", "actor_rollout_ref.model.lora.rank",
                        "distillation.distillation_loss.use_policy_gradient", "trainer.n_gpus_per_node",
                        "model_engine", "+ray_kwargs.ray_init.address"})
    EXPECT_TRUE(keys.Contains(k)) << k;
  // Keys an older or imagined Verl has are not there.
  EXPECT_FALSE(keys.Contains("actor_rollout_ref.rollout.expert_model_parallel_size"));
  EXPECT_FALSE(keys.Contains("ray_kwargs.ray_init.address"));
}

TEST(VerlKeys, ParseNamesTheLineOfAMalformedKey) {
  auto k = VerlKeys::Parse("# header\n#   commit  " + std::string(40, 'a') + " (2026)\na.b\n\nc.d  # note\n", "k.txt");
  ASSERT_TRUE(k.ok()) << k.status().message();
  EXPECT_EQ(k->size(), 2u);
  EXPECT_TRUE(k->Contains("c.d"));
  EXPECT_EQ(k->commit(), std::string(40, 'a'));
  EXPECT_EQ(VerlKeys::Parse("a.b\nx = 1\n", "k.txt").status().message(), "k.txt:2: not a dotted key: \"x = 1\"");
  EXPECT_EQ(VerlKeys::Parse("# only comments\n", "k.txt").status().message(), "k.txt: no keys");
}

TEST(VerlOverrides, CarryTheH200FullPlan) {
  const auto m = Overrides(SeedLaunch("h200-full", LaunchTarget::kSlurm, LaunchEngine::kVerl));
  const std::map<std::string, std::string> expected = {
      {"model_engine", "megatron"},
      {"actor_rollout_ref.actor.megatron.tensor_model_parallel_size", "8"},
      {"actor_rollout_ref.actor.megatron.pipeline_model_parallel_size", "2"},
      {"actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size", "null"},
      {"actor_rollout_ref.actor.megatron.expert_model_parallel_size", "8"},
      {"actor_rollout_ref.actor.megatron.expert_tensor_parallel_size", "1"},
      {"actor_rollout_ref.actor.megatron.context_parallel_size", "1"},
      {"actor_rollout_ref.rollout.tensor_model_parallel_size", "8"},
      {"actor_rollout_ref.rollout.expert_parallel_size", "8"},
      {"actor_rollout_ref.rollout.data_parallel_size", "1"},
      {"actor_rollout_ref.rollout.n", "1"},
      {"actor_rollout_ref.rollout.gpu_memory_utilization", "0.5"},
      {"data.max_prompt_length", "2048"},
      {"data.max_response_length", "2048"},
      {"data.train_batch_size", "128"},
      {"trainer.nnodes", "16"},
      {"trainer.n_gpus_per_node", "8"},
      {"distillation.enabled", "True"},
      {"distillation.nnodes", "1"},
      {"distillation.n_gpus_per_node", "8"},
      {"distillation.distillation_loss.loss_mode", "k1"},
      {"distillation.distillation_loss.use_policy_gradient", "True"},
      {"distillation.teacher_models.teacher_model.model_path", "/cache/models/kimi-k2.6"},
      {"distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size", "8"},
      {"distillation.teacher_models.teacher_model.inference.expert_parallel_size", "8"},
      {"+ray_kwargs.ray_init.address", "auto"},
  };
  for (const auto& [k, v] : expected) {
    auto it = m.find(k);
    ASSERT_NE(it, m.end()) << k;
    EXPECT_EQ(it->second, v) << k;
  }
  EXPECT_EQ(m.count("actor_rollout_ref.model.lora.rank"), 0u);  // full fine-tuning
}

TEST(VerlOverrides, CarryLoraInMegatronBridgesKeys) {
  const auto m = Overrides(SeedLaunch("h200-lora", LaunchTarget::kModal, LaunchEngine::kVerl));
  EXPECT_EQ(m.at("actor_rollout_ref.model.lora.rank"), "32");
  EXPECT_EQ(m.at("actor_rollout_ref.model.lora.alpha"), "64");
  // Kimi K2.6 is MLA with a low-rank q: its projections, then the routed experts.
  EXPECT_EQ(m.at("actor_rollout_ref.model.lora.target_modules"),
            "[\"linear_q_down_proj\",\"linear_q_up_proj\",\"linear_kv_down_proj\",\"linear_kv_up_proj\","
            "\"linear_proj\",\"*.mlp.experts.*linear_fc1\",\"*.mlp.experts.*linear_fc2\"]");
  EXPECT_EQ(m.at("actor_rollout_ref.actor.megatron.tensor_model_parallel_size"), "4");
  EXPECT_EQ(m.at("actor_rollout_ref.actor.megatron.expert_model_parallel_size"), "4");
  EXPECT_EQ(m.at("trainer.nnodes"), "2");
}

TEST(VerlOverrides, FollowVpRecomputeAndTheTeacherPool) {
  Launch l = SeedLaunch("b200-full", LaunchTarget::kSlurm, LaunchEngine::kVerl);
  l.request.schedule = ScheduleKind::kInterleaved1F1B;
  l.evaluation.plan.vp = 2;
  l.request.recompute = Recompute::kFull;
  l.options.teacher_nodes = 0;
  l.options.model_path = "/data/kimi k2.6";
  const auto m = Overrides(l);
  EXPECT_EQ(m.at("actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size"), "2");
  EXPECT_EQ(m.at("actor_rollout_ref.actor.megatron.override_transformer_config.recompute_granularity"), "full");
  EXPECT_EQ(m.at("actor_rollout_ref.actor.megatron.override_transformer_config.recompute_method"), "uniform");
  EXPECT_EQ(m.at("actor_rollout_ref.actor.megatron.override_transformer_config.recompute_num_layers"), "1");
  EXPECT_EQ(m.at("actor_rollout_ref.model.path"), "'/data/kimi k2.6'");
  for (const auto& [k, v] : m) EXPECT_NE(k.rfind("distillation.", 0), 0u) << "no teacher pool, yet " << k;
  l.request.recompute_method = RecomputeMethod::kBlock;
  l.request.recompute_layers = 2;
  const auto block = Overrides(l);
  EXPECT_EQ(block.at("actor_rollout_ref.actor.megatron.override_transformer_config.recompute_method"), "block");
  EXPECT_EQ(block.at("actor_rollout_ref.actor.megatron.override_transformer_config.recompute_num_layers"), "2");
}

const std::string kFirst =
    "+actor_rollout_ref.actor.megatron.override_transformer_config.num_layers_in_first_pipeline_stage";
const std::string kLast =
    "+actor_rollout_ref.actor.megatron.override_transformer_config.num_layers_in_last_pipeline_stage";

// A dense GPT of `layers` on pp ranks of vp virtual stages (interleaved when
// vp > 1), split as `split` says.
Launch GptLaunch(int layers, int pp, int vp, const std::string& split) {
  PlanRequest r = testing::SeedRequest("kimi-k2.6", "h200", pp / 8);
  r.model = testing::Gpt(layers, 1024, 16, 32000);
  r.plan = ParallelPlan{1, pp, vp, 1, 1, 1, 1, 1, 1, 1};
  if (vp > 1) r.schedule = ScheduleKind::kInterleaved1F1B;
  r.layer_split = *ParseLayerSplit(split);
  Launch l = testing::MakeLaunch(r, "gpt", LaunchTarget::kSlurm, LaunchEngine::kVerl);
  l.options.teacher_nodes = 0;
  return l;
}

// h200-full's even split of 61 layers over pp 2 is 31 + 30: Megatron builds
// it with 31 layers on the first stage and the other 30 on the last.
TEST(VerlOverrides, RealiseTheEvenSplitOfTheSeed) {
  const auto m = Overrides(SeedLaunch("h200-full", LaunchTarget::kSlurm, LaunchEngine::kVerl));
  EXPECT_EQ(m.at(kFirst), "31");
  EXPECT_EQ(m.count(kLast), 0u);
}

// Megatron's default needs no key; uneven ends need theirs, with virtual
// stages the rank's total (transformer_config.py: divisible by vp).
TEST(VerlOverrides, EmitTheEndStagesTheSplitNeeds) {
  auto uniform = Overrides(GptLaunch(128, 64, 1, "megatron"));
  EXPECT_EQ(uniform.count(kFirst) + uniform.count(kLast), 0u);
  auto qwen = Overrides(GptLaunch(94, 8, 1, "11,12,12,12,12,12,12,11"));
  EXPECT_EQ(qwen.at(kFirst), "11");
  EXPECT_EQ(qwen.at(kLast), "11");
  auto vp = Overrides(GptLaunch(32, 8, 2, "3,2,2,2,2,2,2,1,3,2,2,2,2,2,2,1"));
  EXPECT_EQ(vp.at("actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size"), "2");
  EXPECT_EQ(vp.at(kFirst), "6");
  EXPECT_EQ(vp.at(kLast), "2");
  // The ref interpolates the actor's override_transformer_config: no keys of its own.
  for (const auto& [k, v] : vp) EXPECT_EQ(k.find("ref.megatron.override_transformer_config"), std::string::npos) << k;
}

// A split the two fields cannot give (torchtitan's 2, 3, 2, ..., 2, 1 for 128
// layers on pp 64) goes as its layout, and then without the fields.
TEST(VerlOverrides, EmitALayoutWhereTheFieldsCannot) {
  auto even = Overrides(GptLaunch(128, 64, 1, "even"));
  EXPECT_EQ(even.at("+actor_rollout_ref.actor.megatron.override_transformer_config.pipeline_model_parallel_layout"),
            "'Ett|ttt|(tt|)*61tL'");
  EXPECT_EQ(even.count(kFirst) + even.count(kLast), 0u);
}

// The recipe's knobs go as the fields Megatron reads, and a default recipe
// adds none of them.
TEST(VerlOverrides, CarryTheRecipe) {
  const std::string rc = "actor_rollout_ref.actor.megatron.override_transformer_config.";
  Launch plain = GptLaunch(128, 64, 1, "megatron");
  for (const auto& [k, v] : Overrides(plain)) {
    EXPECT_EQ(k.find("fp8"), std::string::npos) << k;
    EXPECT_EQ(k.find("moe_"), std::string::npos) << k;
    EXPECT_EQ(k.find("override_optimizer_config"), std::string::npos) << k;
  }
  Launch l = GptLaunch(128, 64, 1, "megatron");
  l.request.recompute = Recompute::kSelective;
  l.request.recipe.recompute_modules = {RecomputeModule::kMlaUpProj, RecomputeModule::kMoeAct};
  l.request.recipe.fp8 = Fp8Recipe::kBlockwise;
  l.request.recipe.fp8_param_gather = true;
  l.request.recipe.dispatcher = Dispatcher::kDeepEp;
  l.request.recipe.a2a_overlap = true;
  l.request.recipe.moments = MomentsDtype::kBf16;
  l.request.recipe.grad_reduce_in_fp32 = false;
  l.request.recipe.cuda_graphs = CudaGraphs::kModules;
  auto o = Overrides(l);
  EXPECT_EQ(o.at("+" + rc + "cuda_graph_impl"), "transformer_engine");
  EXPECT_EQ(o.at("+" + rc + "cuda_graph_scope"), "[\"attn\",\"moe_router\",\"moe_preprocess\"]");
  EXPECT_EQ(o.at(rc + "recompute_modules"), "[\"mla_up_proj\",\"moe_act\"]");
  EXPECT_EQ(o.at("+" + rc + "fp8"), "e4m3");
  EXPECT_EQ(o.at("+" + rc + "fp8_recipe"), "blockwise");
  EXPECT_EQ(o.at("+" + rc + "fp8_param"), "True");
  EXPECT_EQ(o.at("+" + rc + "moe_token_dispatcher_type"), "flex");
  EXPECT_EQ(o.at("+" + rc + "moe_flex_dispatcher_backend"), "deepep");
  EXPECT_EQ(o.at("+" + rc + "overlap_moe_expert_parallel_comm"), "True");
  EXPECT_EQ(o.at("+" + rc + "delay_wgrad_compute"), "True");
  EXPECT_EQ(o.at("+actor_rollout_ref.actor.optim.override_optimizer_config.exp_avg_dtype"), "torch.bfloat16");
  EXPECT_EQ(o.at("+actor_rollout_ref.actor.megatron.override_ddp_config.grad_reduce_in_fp32"), "False");
}

// Every key any seed launch emits is one of Verl's (the list checks itself,
// and this states it for each emitted key).
TEST(VerlOverrides, EveryEmittedKeyIsInTheList) {
  const VerlKeys keys = RepoVerlKeys();
  for (const char* preset : {"h200-full", "b200-full", "h200-lora"}) {
    for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      Launch l = SeedLaunch(preset, LaunchTarget::kSlurm, LaunchEngine::kVerl);
      l.request.recompute = rc;
      auto v = VerlOverrides(l, keys);
      ASSERT_TRUE(v.ok()) << v.status().message();
      for (const VerlOverride& o : *v) EXPECT_TRUE(keys.Contains(o.key)) << preset << ": " << o.key;
    }
  }
  auto both = VerlOverrides(GptLaunch(94, 8, 1, "11,12,12,12,12,12,12,11"), keys);
  ASSERT_TRUE(both.ok()) << both.status().message();
  for (const VerlOverride& o : *both) EXPECT_TRUE(keys.Contains(o.key)) << o.key;
}

TEST(VerlOverrides, FailNamingAKeyTheListLacks) {
  RealFileSystem fs;
  std::string text = *fs.ReadFile(testing::RepoVerlKeysPath(), limits::kMaxSpecFileBytes);
  const std::string line = "\ntrainer.nnodes\n";
  const size_t at = text.find(line);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, line.size(), "\n");
  auto keys = VerlKeys::Parse(text, "k.txt");
  ASSERT_TRUE(keys.ok());
  auto v = VerlOverrides(SeedLaunch("h200-full", LaunchTarget::kSlurm, LaunchEngine::kVerl), *keys);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), Status::Code::kInternal);
  EXPECT_EQ(v.status().message().rfind("verl override key \"trainer.nnodes\" is not in ", 0), 0u) << v.status().message();
}

}  // namespace
}  // namespace kp
