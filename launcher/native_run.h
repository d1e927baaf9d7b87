// What the native runtime (`kimi-plan run`) executes of a plan. A plan is
// run as planned or not at all: each setting the runtime does not execute
// yet is refused by its flag, for `launch --engine native` and for
// `run --plan ID` alike (docs/launcher.md, "The native runtime's contract").
// Thread-safety: none needed; pure functions of their arguments.
#ifndef KIMI_PLAN_LAUNCHER_NATIVE_RUN_H_
#define KIMI_PLAN_LAUNCHER_NATIVE_RUN_H_

#include "common/status.h"
#include "planner/plan_request.h"

namespace kp {

/// The recomputation the runtime executes: whole decoder layers, each
/// recomputed in backward from its input.
struct LayerCheckpointing {
  bool enabled = false;
  /// 0: every layer (Megatron's full / uniform 1); N > 0: the first N
  /// layers of each pipeline stage (Megatron's block N).
  int first_layers = 0;
  /// Selective recomputation of single modules (Megatron's
  /// --recompute-modules moe and mlp): an MoE layer's MoE block, a dense
  /// layer's MLP.
  bool moe = false;
  bool mlp = false;
  /// Megatron's --recompute-modules shared_experts, layernorm, moe_act and
  /// mla_up_proj.
  bool shared_experts = false;
  bool layernorm = false;
  bool moe_act = false;
  bool mla_up_proj = false;
  /// With enabled and first_layers 0: recompute N layers at a time (Megatron's
  /// uniform N), each group from its first layer's input.
  int group_layers = 1;
  bool operator==(const LayerCheckpointing&) const = default;
};

/// The checkpointing that executes r's recomputation: none; full, uniform
/// N or block N; selective of the modules core_attn (with flash attention,
/// which the planner prices as nothing: a fused attention keeps no scores to
/// drop), and every other module of Megatron's. An eager attention core is
/// refused naming --recompute.
Result<LayerCheckpointing> CheckpointingOf(const PlanRequest& r);

/// Ok when the runtime executes every setting of r: its recomputation
/// (CheckpointingOf), fp32 states (sharded by the distributed optimizer or
/// not), bf16 products (no FP8, no fp16), the
/// colocated placement, LoRA's
/// default targets and experts on a bf16 or fp32 base, no MTP layers.
/// Else InvalidArgument naming the first flag it does not execute and the
/// setting that it does.
Status CheckNativeExecutes(const PlanRequest& r);

}  // namespace kp

#endif  // KIMI_PLAN_LAUNCHER_NATIVE_RUN_H_
