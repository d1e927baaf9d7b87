// The Hugging Face name table (weights/hf_names.h) against the runtime's
// real parameters: every parameter and router bias of a scaled Kimi K2.6
// (MLA with q and kv LoRA ranks, a dense first layer, MoE layers with a
// shared expert) has its released names, which map back to it, with each
// expert bank's slices one per expert.
#include <gtest/gtest.h>

#include <set>

#include "common/file_system.h"
#include "runtime/model/model.h"
#include "runtime/model/test_util.h"
#include "weights/hf_names.h"

namespace kp::runtime {
namespace {

TEST(HfNamesModelTest, EveryTensorOfAScaledKimiK26HasItsReleasedNames) {
  ModelOptions options;
  options.deferred_init = true;  // names and shapes only
  const ModelSpec spec = ScaledKimiK26Spec(64);
  Result<std::shared_ptr<StageModelImpl>> model = BuildModel(spec, options);
  ASSERT_TRUE(model.ok()) << model.status().message();
  std::vector<std::string> names;
  for (const auto& p : (*model)->named_parameters()) names.push_back(p.key());
  for (const auto& b : (*model)->named_buffers())
    if (b.key().find("router.bias") != std::string::npos) names.push_back(b.key());
  std::set<std::string> hf_all;
  for (const std::string& name : names) {
    Result<std::vector<std::string>> hf = HfNamesOf(name, spec.moe.num_experts, false);
    ASSERT_TRUE(hf.ok()) << hf.status().message();
    const bool bank = name.find("moe.experts.") != std::string::npos;
    EXPECT_EQ(hf->size(), bank ? static_cast<std::size_t>(spec.moe.num_experts) : 1u) << name;
    for (std::size_t e = 0; e < hf->size(); ++e) {
      Result<RuntimeTarget> back = RuntimeTargetOf((*hf)[e]);
      ASSERT_TRUE(back.ok()) << back.status().message();
      EXPECT_EQ(back->name, name);
      EXPECT_EQ(back->expert, bank ? static_cast<int>(e) : -1);
      EXPECT_TRUE(hf_all.insert((*hf)[e]).second) << (*hf)[e] << " named twice";
    }
  }
  // The released layout's landmarks are among them.
  for (const char* want : {"model.layers.0.mlp.gate_proj.weight", "model.layers.1.mlp.gate.e_score_correction_bias",
                           "model.layers.2.mlp.experts.3.down_proj.weight", "model.layers.1.self_attn.q_a_proj.weight",
                           "model.layers.1.mlp.shared_experts.down_proj.weight", "lm_head.weight"})
    EXPECT_TRUE(hf_all.count(want)) << want;
}

}  // namespace
}  // namespace kp::runtime
