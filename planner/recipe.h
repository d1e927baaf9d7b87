// The recipe knobs of Megatron-Core MoE training that the planner prices
// beyond the layout: FP8 recipes, the optimizer's moment precision,
// fine-grained recomputation by module, the MoE token dispatcher and the
// overlap of the expert all-to-all with the other micro-batch. Each name is
// the one Megatron-LM reads (docs/planner.md, "Recipe knobs").
#ifndef KIMI_PLAN_PLANNER_RECIPE_H_
#define KIMI_PLAN_PLANNER_RECIPE_H_

#include <string>
#include <vector>

#include "common/status.h"
#include "specs/gpu_spec.h"

namespace kp {

/// Megatron-LM's --fp8-recipe for the linear layers (the embedding, the
/// output layer, the attention core and the router stay in BF16).
enum class Fp8Recipe {
  kNone,        ///< BF16 (or FP16) products
  kTensorwise,  ///< one scale per tensor (current scaling; Hopper and Blackwell)
  kBlockwise,   ///< DeepSeek-V3's 1x128 activations / 128x128 weights (Hopper and Blackwell)
  kMxfp8,       ///< MX FP8: a scale per 32 elements, in hardware (Blackwell only)
};

enum class MomentsDtype { kFp32, kBf16 };

/// Megatron-LM's --moe-token-dispatcher-type (flex with its backend).
enum class Dispatcher {
  kAllToAll,  ///< NCCL all-to-all, with permute/unpermute kernels around it
  kDeepEp,    ///< flex + DeepEP: fused permutation, NVLink/RDMA kernels
  kHybridEp,  ///< flex + HybridEP: DeepEP's successor for NVLink domains (NVL72)
};

/// Megatron-LM's --recompute-modules (with --recompute-granularity selective).
enum class RecomputeModule {
  kCoreAttn,       ///< the attention core (Megatron's default selective)
  kMoeAct,         ///< the routed experts' activation function
  kLayernorm,      ///< input and pre-MLP norms
  kMlaUpProj,      ///< MLA's q and kv up-projections
  kMlp,            ///< a dense layer's MLP
  kMoe,            ///< the whole MoE block
  kSharedExperts,  ///< the shared experts
};

/// What a routed expert copy keeps for the backward. kNative: the runtime's
/// experts (runtime/model), which weigh each expert's output by its router
/// probability after the second product and so keep that output too.
/// kMegatron: Megatron-Core's grouped experts, which fold the probability
/// into the activation and keep only the products' inputs and SwiGLU's.
enum class ExpertActivations { kNative, kMegatron };

/// CUDA graphs (Megatron's cuda_graph_impl): none, or TransformerEngine's
/// per-module graphs of the attention, the router and the MoE preprocessing
/// (cuda_graph_scope attn, moe_router, moe_preprocess), which replay those
/// modules' launches as one each.
enum class CudaGraphs { kNone, kModules };

struct RecipeOptions {
  Fp8Recipe fp8 = Fp8Recipe::kNone;
  /// --fp8-param-gather: weights kept (and all-gathered by the distributed
  /// optimizer) in FP8, one byte each instead of two.
  bool fp8_param_gather = false;
  MomentsDtype moments = MomentsDtype::kFp32;
  /// Megatron's grad_reduce_in_fp32: the gradient buffer (and its
  /// reduction) in fp32 under bf16, as Megatron-LM forces; off keeps it in
  /// bf16 (Megatron-Bridge's performance recipes).
  bool grad_reduce_in_fp32 = true;
  /// With --recompute selective: the modules recomputed in backward.
  /// Megatron's default is {core_attn}.
  std::vector<RecomputeModule> recompute_modules = {RecomputeModule::kCoreAttn};
  Dispatcher dispatcher = Dispatcher::kAllToAll;
  /// --overlap-moe-expert-parallel-comm: the dispatch and combine of one
  /// micro-batch run under another's compute (with --delay-wgrad-compute).
  bool a2a_overlap = false;
  /// Follows the engine: kMegatron with --engine verl and for published
  /// Megatron runs, kNative for kimi-plan run.
  ExpertActivations expert_activations = ExpertActivations::kNative;
  CudaGraphs cuda_graphs = CudaGraphs::kNone;
  bool operator==(const RecipeOptions&) const = default;

  bool recomputes(RecomputeModule m) const;
};

const char* Fp8RecipeName(Fp8Recipe r);
const char* MomentsDtypeName(MomentsDtype m);
const char* DispatcherName(Dispatcher d);
const char* RecomputeModuleName(RecomputeModule m);
const char* ExpertActivationsName(ExpertActivations e);
const char* CudaGraphsName(CudaGraphs g);
/// "none" or "modules"; anything else is refused naming `field`.
Result<CudaGraphs> ParseCudaGraphs(const std::string& text, const std::string& field);
/// "native" or "megatron"; anything else is refused naming `field`.
Result<ExpertActivations> ParseExpertActivations(const std::string& text, const std::string& field);

/// "bf16", "fp16", "fp8-tensorwise", "fp8-blockwise" or "mxfp8" (--dtype):
/// whether the non-FP8 parts run in bf16, and the FP8 recipe. An FP8 recipe
/// on a GPU without FP8, or MX FP8 on one that is not Blackwell, is refused
/// naming `field`.
struct PrecisionChoice {
  bool bf16 = true;
  Fp8Recipe fp8 = Fp8Recipe::kNone;
};
Result<PrecisionChoice> ParsePrecision(const std::string& name, const GpuSpec& gpu, const std::string& field = "--dtype");
/// The --dtype name of a choice.
std::string PrecisionName(bool bf16, Fp8Recipe fp8);

Result<MomentsDtype> ParseMomentsDtype(const std::string& name, const std::string& field = "--optimizer-moments");
Result<Dispatcher> ParseDispatcher(const std::string& name, const std::string& field = "--dispatcher");
/// A comma-separated list of Megatron's module names, each once, none
/// empty; InvalidArgument naming `field` and the allowed names.
Result<std::vector<RecomputeModule>> ParseRecomputeModules(const std::string& list,
                                                           const std::string& field = "--recompute-modules");
/// The modules as Megatron's comma-separated list.
std::string RecomputeModulesList(const std::vector<RecomputeModule>& modules);

}  // namespace kp

#endif  // KIMI_PLAN_PLANNER_RECIPE_H_
