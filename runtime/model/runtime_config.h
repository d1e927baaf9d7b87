// How the runtime builds and runs a ModelSpec: precision, activation
// checkpointing, LoRA, and the flags that scale a preset down to a size a
// CPU or one GPU can train. Plain data, no LibTorch: the CLI includes it.
#ifndef KIMI_PLAN_RUNTIME_MODEL_RUNTIME_CONFIG_H_
#define KIMI_PLAN_RUNTIME_MODEL_RUNTIME_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "specs/model_spec.h"

namespace kp::runtime {

/// The activation dtype. Parameters, optimizer state, norms, softmaxes, the
/// attention-residual reads, the KDA recurrence and the loss stay fp32.
enum class DType { kFp32, kBf16 };
const char* DTypeName(DType d);
/// "fp32" or "bf16"; anything else is an InvalidArgument naming `field`.
Result<DType> ParseDType(const std::string& s, const std::string& field = "--dtype");

/// LoRA on the routed experts: `kSharedOuter` shares the gate/up A and the
/// down B (the sides that face the hidden stream) across a layer's experts;
/// `kPerExpert` gives every expert its own A and B.
enum class LoraExperts { kSharedOuter, kPerExpert };

struct LoraOptions {
  int rank = 0;         ///< 0: no adapters, every parameter trains
  double alpha = 0;     ///< the update is (alpha / rank) * B A
  LoraExperts experts = LoraExperts::kSharedOuter;
  bool enabled() const { return rank > 0; }
};

/// Runtime knobs that do not change the parameter shapes.
struct ModelOptions {
  DType dtype = DType::kFp32;
  /// How the weight matrices (projections, expert banks, embedding, LM head)
  /// are stored; norms, gates, convolutions and routers stay fp32. bf16: a
  /// LoRA run's frozen base, as the planner prices it.
  DType weight_dtype = DType::kFp32;
  bool activation_checkpointing = false;  ///< recompute decoder layers in backward, each from its input
  /// With activation_checkpointing: 0, every layer; N > 0, only the first N
  /// layers of each stage (Megatron's --recompute-method block).
  int checkpoint_first_layers = 0;
  /// With activation_checkpointing and checkpoint_first_layers 0: N > 1
  /// recomputes each stage's layers N at a time, each group from its first
  /// layer's input (Megatron's --recompute-method uniform
  /// --recompute-num-layers N); 1 is every layer on its own.
  int checkpoint_group_layers = 1;
  /// Megatron's --recompute-modules moe and mlp (selective recomputation):
  /// an MoE layer's whole MoE block (router, shared and routed experts), or
  /// a dense layer's MLP, keeps only its input for the backward and is run
  /// again there.
  bool recompute_moe = false;
  bool recompute_mlp = false;
  /// Megatron's --recompute-modules shared_experts: the shared experts keep
  /// only their input and run again in the backward.
  bool recompute_shared_experts = false;
  /// Megatron's --recompute-modules layernorm, moe_act and mla_up_proj: the
  /// module's outputs, which the next operation saves, are freed after it
  /// and remade before its backward (OutputRecompute, recompute.h): the two
  /// norms' outputs; each routed expert's SwiGLU product (the loop over
  /// experts; the grouped GEMM path remakes it always); MLA's up-projected
  /// and rotated queries, keys and values.
  bool recompute_layernorm = false;
  bool recompute_moe_act = false;
  bool recompute_mla_up_proj = false;
  int kda_chunk = 16;                     ///< chunk length of the KDA scan; 0 = token-by-token recurrence
  bool fused_kernels = true;              ///< the CUDA kernels where built and applicable (KDA, grouped experts)
  /// KDA's chunk scan on tensor cores (TF32 products, fp32 accumulation;
  /// runtime/kernels/kda.h KdaMath) where the fused kernels run; false: in
  /// fp32 on CUDA cores, the reference form.
  bool kda_tensor_cores = true;
  /// With LoRA: the routed experts' frozen base kept as released INT4
  /// (int4_linear.h, 0.5625 bytes a weight), dequantized inside each
  /// product; the planner's --lora-native-base.
  bool int4_expert_base = false;
  /// The routed experts' products in FP8 as DeepSeek-V3 trains them
  /// (fp8_linear.h: e4m3, 1x128 / 128x128 block scales, fp32 accumulation;
  /// the planner's fp8-blockwise recipe, on the experts only). Not with
  /// int4_expert_base.
  bool fp8_experts = false;
  std::uint64_t seed = 0;                 ///< parameter initialisation seed
  /// Build the large weights as meta tensors, to be sharded and then made by
  /// StageModelImpl::Materialize (sharded construction, model.h).
  bool deferred_init = false;
};

/// Overrides that scale a preset (all optional). Widths that follow the
/// hidden size (dense_ffn, expert_ffn, shared_ffn, latent_dim, q/kv LoRA
/// ranks) are scaled by the same ratio; head dimensions are kept.
struct ScaleFlags {
  std::optional<int> layers, hidden, heads, experts, top_k, vocab, attn_res_block, dense_layers;
};

/// The preset with the flags applied, validated for the runtime. With fewer
/// layers the first layers - 1 keep the preset's attention kinds and the last
/// layer keeps the preset's last kind (Kimi K3's closing MLA).
Result<ModelSpec> ScaleModel(const ModelSpec& preset, const ScaleFlags& flags);

/// Whether `--lora-native-base` (the planner's: the frozen base kept in the
/// model's storage format) makes the routed experts' base INT4
/// (ModelOptions::int4_expert_base): yes for 4-bit storage in groups of 32,
/// no for 16-bit storage (the base is bf16 either way); an InvalidArgument
/// naming --lora-native-base for a format the runtime does not hold (INT8,
/// other group sizes).
Result<bool> Int4ExpertBase(const ModelSpec& m, bool native_base);

/// ModelSpec::Validate plus what this runtime can build: untied head, even
/// RoPE widths, MHA heads that divide the hidden size. The message names the
/// field (as a flag where one exists) and what is allowed.
Status ValidateForRuntime(const ModelSpec& m);

/// The shape-defining fields as one JSON object (stable key order): what a
/// checkpoint records and a resume compares.
std::string ModelShapeJson(const ModelSpec& m, const LoraOptions& lora);

/// The first field where two shape JSONs differ, e.g. "hidden: 256 vs 128";
/// empty when equal.
std::string FirstShapeDifference(const std::string& a_json, const std::string& b_json);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_MODEL_RUNTIME_CONFIG_H_
