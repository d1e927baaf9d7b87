// The work of one micro-batch through one decoder layer on one rank, as the
// kernels see it: the matrix products with their shapes (after TP, ETP, EP
// and CP have cut them), and the bytes the memory-bound passes between them
// move (norms, residual adds, dropout, activation functions, the eager
// softmax, MoE permutations). The step-time model prices the products from
// the GPU's calibration table and the bytes at its copy bandwidth
// (docs/planner.md, "Step time").
#ifndef KIMI_PLAN_PLANNER_LAYER_OPS_H_
#define KIMI_PLAN_PLANNER_LAYER_OPS_H_

#include <vector>

#include "planner/plan_request.h"
#include "planner/recipe.h"
#include "specs/model_spec.h"

namespace kp {

/// Which of Megatron-LM's recompute modules an op belongs to
/// (planner/recipe.h), for pricing what selective recomputation redoes.
enum class OpModule { kOther, kCoreAttn, kMlaUpProj, kLayernorm, kMlp, kMoe, kMoeAct, kSharedExperts };
inline constexpr int kOpModules = 8;
/// Whether recomputing `recomputed` redoes an op of `module` ("moe" takes
/// the routed experts' activation and the shared experts with it).
bool RecomputeCovers(RecomputeModule recomputed, OpModule module);
/// Whether one of `recipe`'s recompute modules covers `module`: what
/// selective recomputation redoes in time and drops from memory.
bool RecomputedBy(const RecipeOptions& recipe, OpModule module);

/// `count` products of A[m, k] B[k, n] in the forward pass. The backward
/// runs each as a data-gradient product (m, k, n) and a weight-gradient
/// product (k, n, m). `weight` is false for products of two activations
/// (attention scores, the KDA chunks): one batched kernel of `count`
/// products, with two data gradients and no weight gradient.

struct GemmOp {
  double m = 0, n = 0, k = 0;
  double count = 1;
  bool weight = true;
  /// A linear layer's product: it runs in FP8 under an FP8 recipe (the
  /// router, the attention core and the output layer stay in BF16).
  bool fp8 = false;
  OpModule module = OpModule::kOther;
  /// One of `count` experts' products run as one grouped product.
  bool grouped = false;
  double flops() const { return 2 * m * n * k * count; }
};

struct LayerOps {
  std::vector<GemmOp> gemms;
  /// Bytes the memory-bound passes read plus write, forward and backward.
  double elementwise_bytes = 0;
  double elementwise_backward_bytes = 0;
  /// The forward bytes of `elementwise_bytes` by module.
  double module_bytes[kOpModules] = {};
  /// The module the next ops are added to (the builders set it).
  OpModule module = OpModule::kOther;
  /// The share of `elementwise_bytes` that selective recomputation redoes in
  /// the backward (the eager softmax and attention dropout).
  double recomputed_core_bytes = 0;
  /// Forward products that selective recomputation redoes (attention scores).
  std::vector<GemmOp> recomputed_core_gemms;
};

/// Tokens of one micro-batch on one rank: sequence x micro-batch / cp.
double MicroBatchTokens(const PlanRequest& req, const ParallelPlan& p);

/// Layer `layer`'s products and memory-bound bytes for one micro-batch on
/// one rank (`imbalance`: the busiest expert rank's share of routed tokens).
LayerOps DecoderLayerOps(const PlanRequest& req, const ParallelPlan& p, int layer, double imbalance);
/// The head's products (final norm, vocabulary-parallel logits and loss).
LayerOps HeadOps(const PlanRequest& req, const ParallelPlan& p);
/// What an MTP layer adds to its decoder layer and its second pass of the
/// head: the norms of its two inputs and the 2h -> h projection (split over
/// TP as Megatron-LM's column-parallel eh_proj).
LayerOps MtpProjectionOps(const PlanRequest& req, const ParallelPlan& p);

}  // namespace kp

#endif  // KIMI_PLAN_PLANNER_LAYER_OPS_H_
