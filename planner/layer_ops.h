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
#include "specs/model_spec.h"

namespace kp {

/// `count` products of A[m, k] B[k, n] in the forward pass. The backward
/// runs each as a data-gradient product (m, k, n) and a weight-gradient
/// product (k, n, m). `weight` is false for products of two activations
/// (attention scores, the KDA chunks): one batched kernel of `count`
/// products, with two data gradients and no weight gradient.
struct GemmOp {
  double m = 0, n = 0, k = 0;
  double count = 1;
  bool weight = true;
  double flops() const { return 2 * m * n * k * count; }
};

struct LayerOps {
  std::vector<GemmOp> gemms;
  /// Bytes the memory-bound passes read plus write, forward and backward.
  double elementwise_bytes = 0;
  double elementwise_backward_bytes = 0;
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

}  // namespace kp

#endif  // KIMI_PLAN_PLANNER_LAYER_OPS_H_
