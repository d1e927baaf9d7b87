// OutputRecompute (Megatron's CheckpointWithoutOutput) on small fp64
// functions: the outputs' memory is gone between the consumer's forward and
// its backward, the function runs exactly once more, and the gradients are
// the plain graph's bit for bit.
#include "runtime/model/recompute.h"

#include <gtest/gtest.h>

#include <torch/torch.h>

namespace kp::runtime {
namespace {

struct Grads {
  torch::Tensor x, w;
};

// loss = sum(y0 * y0 + 3 y1) with (y0, y1) = (tanh(x w), sin(x) w), w a
// parameter the function reads as a module reads its weights: the
// consumer's products save y0, as a norm's consumer saves the norm's output.
Grads Differentiate(bool recompute, int* calls, bool* freed) {
  torch::manual_seed(5);
  torch::Tensor x = torch::randn({4, 3}, torch::kDouble).requires_grad_(true);
  torch::Tensor w = torch::randn({3}, torch::kDouble).requires_grad_(true);
  auto fn = [&](const std::vector<torch::Tensor>& in) {
    ++*calls;
    return std::vector<torch::Tensor>{torch::tanh(in[0] * w), torch::sin(in[0]) * w};
  };
  OutputRecompute outputs;
  const std::vector<torch::Tensor> y = recompute ? outputs.Run(fn, {x}, {w}) : fn({x});
  const torch::Tensor consumed = y[0] * y[0] + 3 * y[1];
  if (recompute) {
    outputs.DiscardOutputs(consumed);
    *freed = y[0].storage().nbytes() == 0 && y[1].storage().nbytes() == 0;
  }
  consumed.sum().backward();
  return {x.grad(), w.grad()};
}

TEST(OutputRecomputeTest, FreesTheOutputsAndGivesThePlainGradientsBitwise) {
  int plain_calls = 0, calls = 0;
  bool freed = false;
  const Grads want = Differentiate(false, &plain_calls, &freed);
  const Grads got = Differentiate(true, &calls, &freed);
  EXPECT_TRUE(freed);
  EXPECT_EQ(plain_calls, 1);
  EXPECT_EQ(calls, 2);  // the forward, then once for the consumer's backward
  EXPECT_TRUE(torch::equal(want.x, got.x));
  EXPECT_TRUE(torch::equal(want.w, got.w));
}

TEST(OutputRecomputeTest, WithoutGradModeIsThePlainCall) {
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::arange(6, torch::kDouble);
  OutputRecompute outputs;
  const std::vector<torch::Tensor> y =
      outputs.Run([](const std::vector<torch::Tensor>& in) { return std::vector<torch::Tensor>{in[0] * 2}; }, {x}, {});
  outputs.DiscardOutputs(y[0] + 1);
  EXPECT_TRUE(torch::equal(y[0], x * 2));  // still there
}

}  // namespace
}  // namespace kp::runtime
