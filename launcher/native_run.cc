#include "launcher/native_run.h"

#include <string>

namespace kp {

namespace {

Status NotExecuted(const std::string& flag, const std::string& what, const std::string& instead) {
  return Status::InvalidArgument(flag + ": kimi-plan run does not execute " + what +
                                 " yet, so a native run would not be this plan; plan it with " + instead +
                                 ", or launch it with --engine verl");
}

}  // namespace

Result<LayerCheckpointing> CheckpointingOf(const PlanRequest& r) {
  switch (r.recompute) {
    case Recompute::kNone: return LayerCheckpointing{};
    case Recompute::kSelective: {
      // Megatron's default selective recomputation redoes the attention
      // core; with a fused attention there is nothing it keeps to drop, and
      // the planner prices the two alike (docs/planner.md).
      LayerCheckpointing c;
      for (RecomputeModule m : r.recipe.recompute_modules) {
        if (m == RecomputeModule::kMoe) c.moe = true;
        else if (m == RecomputeModule::kMlp) c.mlp = true;
        else if (m == RecomputeModule::kSharedExperts) c.shared_experts = true;
        else if (m == RecomputeModule::kLayernorm) c.layernorm = true;
        else if (m == RecomputeModule::kMoeAct) c.moe_act = true;
        else if (m == RecomputeModule::kMlaUpProj) c.mla_up_proj = true;
        else if (m == RecomputeModule::kCoreAttn && !r.flash_attention)
          return NotExecuted("--recompute", "selective recomputation of an eager attention core",
                             "--recompute none or full, or --flash-attention on");
      }
      return c;
    }
    case Recompute::kFull: {
      LayerCheckpointing c;
      c.enabled = true;
      if (r.recompute_method == RecomputeMethod::kBlock) c.first_layers = r.recompute_layers;
      else c.group_layers = r.recompute_layers;
      return c;
    }
  }
  return LayerCheckpointing{};
}

Status CheckNativeExecutes(const PlanRequest& r) {
  KP_RETURN_IF_ERROR(CheckpointingOf(r).status());
  // The runtime's FP8 (--fp8 experts) covers the routed experts only, where
  // the planner's recipes price every linear layer in FP8.
  if (r.recipe.fp8 != Fp8Recipe::kNone)
    return NotExecuted("--dtype", std::string("FP8 (") + Fp8RecipeName(r.recipe.fp8) +
                                      ") on every linear layer (its --fp8 experts is the routed experts' alone)",
                       "--dtype bf16 (and run it with --fp8 experts)");
  if (!r.bf16) return NotExecuted("--dtype", "fp16", "--dtype bf16");
  if (r.placement == Placement::kSplit)
    return NotExecuted("--placement", "the split placement (it trains the actor on every GPU it is given)",
                       "--placement colocated");
  if (r.model.mtp_layers > 0)
    return NotExecuted("--model", "MTP layers", "a model without them");
  if (r.mode == TrainMode::kLora) {
    const LoraOptions defaults;
    if (r.lora.experts != defaults.experts)
      return NotExecuted("--lora-experts", "per-expert adapters", "--lora-experts shared-outer");
    if (r.lora.attention != defaults.attention || r.lora.routed_experts != defaults.routed_experts ||
        r.lora.dense_ffn != defaults.dense_ffn)
      return NotExecuted("--lora-targets", "adapters on other targets than attention and the routed experts",
                         "--lora-targets attention,experts");
    // The runtime holds a base as released INT4 in groups of 32 (or bf16).
    const StorageFormat& storage = r.model.storage;
    if (r.lora.native_base && (storage.routed_expert_bits == 8 ||
                               (storage.routed_expert_bits == 4 && storage.quant_group_size != 32)))
      return NotExecuted("--lora-native-base", "an INT8 base or INT4 groups other than 32", "the base in bf16");
  }
  return Status::Ok();
}

}  // namespace kp
