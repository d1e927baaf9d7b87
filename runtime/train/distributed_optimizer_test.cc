// ParameterShards' fp32 masters (Megatron's mixed precision), against the
// parameters and dtypes themselves: one rank owning everything.
#include "runtime/train/distributed_optimizer.h"

#include <gtest/gtest.h>

namespace kp::runtime {
namespace {

TEST(ParameterShardsTest, Bf16ParametersTrainThroughFp32MastersAndFp32AreTheirOwn) {
  torch::Tensor weight = torch::linspace(-1.0, 1.0, 12).reshape({3, 4}).to(torch::kBFloat16);
  torch::Tensor norm = torch::linspace(0.5, 1.5, 4);
  ParameterShards shards({{{weight, norm}, nullptr}});
  ASSERT_EQ(shards.slices().size(), 2u);
  const ParameterShards::Slice& w = shards.slices()[0];
  const ParameterShards::Slice& n = shards.slices()[1];
  EXPECT_EQ(w.values.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(w.values, weight.view({-1}).to(torch::kFloat)));
  EXPECT_TRUE(w.matrix);
  EXPECT_TRUE(n.values.is_same(n.stored));  // fp32: the parameter's own elements
  EXPECT_EQ(shards.master_elements(), 12);
  EXPECT_EQ(shards.owned_elements(), 16);

  // fp32 main gradients bind to the masters.
  weight.mutable_grad() = torch::full({3, 4}, 0.25);
  shards.BindGradients();
  EXPECT_EQ(w.values.grad().scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(w.values.grad(), torch::full({12}, 0.25)));

  // An update smaller than bf16 resolves: the master keeps it, the weight
  // gets its rounding.
  {
    torch::NoGradGuard no_grad;
    w.values.add_(1e-4);
    n.values.add_(1e-4);
  }
  shards.StoreMasters();
  const torch::Tensor want = (torch::linspace(-1.0, 1.0, 12) + 1e-4).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(weight.view({-1}), want));
  EXPECT_FALSE(torch::equal(w.values, want.to(torch::kFloat)));  // the master is not rounded
  EXPECT_TRUE(torch::allclose(norm, torch::linspace(0.5, 1.5, 4) + 1e-4));
  shards.ReleaseGradients();
  EXPECT_FALSE(w.values.grad().defined());
}

}  // namespace
}  // namespace kp::runtime
