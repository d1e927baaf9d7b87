#include "planner/layer_ops.h"

#include <gtest/gtest.h>

namespace kp {
namespace {

// Korthikanti et al.'s GPT layer: MHA, a GeLU FFN of 4h, dropout.
PlanRequest Gpt(int tp, bool flash, bool sp) {
  PlanRequest r;
  ModelSpec& m = r.model;
  m.layers = 2;
  m.hidden = 1024;
  m.heads = 16;
  m.head_dim = 64;
  m.kv_heads = 16;
  m.vocab = 5000;
  m.dense_layers = 2;
  m.dense_ffn = 4096;
  m.gated_ffn = false;
  m.dropout = true;
  m.attention = {AttentionKind::kMha, AttentionKind::kMha};
  r.prompt_length = 512;
  r.response_length = 0;
  r.micro_batch = 2;
  r.plan.tp = tp;
  r.flash_attention = flash;
  r.sequence_parallel = sp;
  return r;
}

double Flops(const std::vector<GemmOp>& ops) {
  double f = 0;
  for (const GemmOp& g : ops) f += g.flops();
  return f;
}

TEST(LayerOpsTest, GptForwardFlopsAreKorthikantis) {
  // Forward FLOPs of one layer: 24 b s h^2 + 4 b s^2 h (the whole square
  // in eager attention), over TP.
  const double b = 2, s = 512, h = 1024;
  for (int tp : {1, 4}) {
    const PlanRequest r = Gpt(tp, /*flash=*/false, false);
    const LayerOps ops = DecoderLayerOps(r, r.plan, 0, 1.0);
    EXPECT_DOUBLE_EQ(Flops(ops.gemms), (24 * b * s * h * h + 4 * b * s * s * h) / tp) << tp;
    // Selective recomputation redoes exactly the two score products.
    EXPECT_DOUBLE_EQ(Flops(ops.recomputed_core_gemms), 4 * b * s * s * h / tp);
  }
  // Flash attention skips the masked half of the causal square.
  const PlanRequest f = Gpt(2, true, true);
  EXPECT_DOUBLE_EQ(Flops(DecoderLayerOps(f, f.plan, 0, 1.0).gemms), (24 * b * s * h * h + 2 * b * s * s * h) / 2);
}

TEST(LayerOpsTest, MemoryBoundBytesOfAGptLayer) {
  const double T = 2 * 512, h = 1024, a = 16, s = 512;
  // No SP: two fused layer norms (4 bytes per element) and two
  // bias-dropout-adds (7) on the whole hidden state on every TP rank, the
  // fused bias-GeLU (4 bytes per element of 4h / t), the fused softmax (4
  // per score) and the attention dropout (5 per score); dropout's forward
  // counts twice (drawing the mask). Backward: norms, GeLU and softmax 1.5x
  // their forward bytes, dropout and residual 1x.
  for (int tp : {1, 2}) {
    const PlanRequest r = Gpt(tp, false, false);
    const LayerOps ops = DecoderLayerOps(r, r.plan, 0, 1.0);
    const double scores = T * s * a / tp;
    EXPECT_DOUBLE_EQ(ops.elementwise_bytes, T * (8 + 2 * 14) * h + T * 4 * h / tp * 4 + scores * (4 + 2 * 5)) << tp;
    EXPECT_DOUBLE_EQ(ops.elementwise_backward_bytes,
                     T * (1.5 * 8 + 14) * h + 1.5 * T * 4 * h / tp * 4 + scores * (1.5 * 4 + 5))
        << tp;
    EXPECT_DOUBLE_EQ(ops.recomputed_core_bytes, scores * 9);
  }
  // SP: the hidden-state passes on a 1/t sequence shard; flash: no scores.
  const PlanRequest r = Gpt(4, true, true);
  EXPECT_DOUBLE_EQ(DecoderLayerOps(r, r.plan, 0, 1.0).elementwise_bytes, T / 4 * 36 * h + T * 4 * h / 4 * 4);
}

TEST(LayerOpsTest, RoutedExpertsSplitTheirTokensOverTheLocalExperts) {
  PlanRequest r = Gpt(2, true, true);
  r.model.moe = {/*num_experts=*/16, /*top_k=*/4, /*expert_ffn=*/512, /*shared_experts=*/0, /*shared_ffn=*/0, 0};
  r.model.dense_layers = 0;
  r.model.gated_ffn = true;
  r.plan.ep = 4;
  r.plan.etp = 2;
  r.plan.dp = 4;
  const LayerOps ops = DecoderLayerOps(r, r.plan, 0, 1.25);
  // The routed products: 2 x (copies on this rank) x 3 x f/etp x h, with
  // copies = T top_k etp / tp x imbalance.
  const double T = 1024, copies = T * 4 * 2 / 2 * 1.25, f = 512.0 / 2;
  double routed = 0;
  for (const GemmOp& g : ops.gemms)
    if (g.count == 4) routed += g.flops();  // 16 experts / ep 4 local experts
  EXPECT_DOUBLE_EQ(routed, 2 * copies * 3 * f * 1024);
}

}  // namespace
}  // namespace kp
