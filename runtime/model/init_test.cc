// The counter-based initialiser: a slice made alone equals the same slice of
// the whole tensor, bit for bit, for any view a shard can be; the draws have
// the distribution asked for; Materialize keeps the parameter objects.
#include "runtime/model/init.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/file_system.h"
#include "runtime/model/model.h"
#include "specs/presets.h"

namespace kp::runtime {
namespace {

torch::Tensor Meta(at::IntArrayRef shape) {
  return torch::empty(shape, torch::TensorOptions().dtype(torch::kFloat).device(torch::kMeta));
}

TEST(InitTest, ASliceMadeAloneIsTheWholeTensorsSlice) {
  const std::uint64_t key = 1234567;
  const torch::Tensor whole_meta = Meta({6, 7, 9});
  const torch::Tensor whole = NormalValuesAt(key, 0.5, whole_meta);
  struct Cut { std::int64_t dim, first, count; };
  // Odd starts and lengths, every dimension, and a slice of a slice (EP then
  // ETP): the views a shard can be.
  for (const Cut& c : {Cut{0, 1, 3}, Cut{1, 3, 3}, Cut{2, 5, 3}, Cut{2, 0, 1}, Cut{0, 0, 6}}) {
    const torch::Tensor got = NormalValuesAt(key, 0.5, whole_meta.narrow(c.dim, c.first, c.count));
    EXPECT_TRUE(torch::equal(got, whole.narrow(c.dim, c.first, c.count))) << c.dim << " " << c.first;
  }
  const torch::Tensor twice = whole_meta.narrow(0, 2, 3).narrow(2, 1, 4);
  EXPECT_TRUE(torch::equal(NormalValuesAt(key, 0.5, twice), whole.narrow(0, 2, 3).narrow(2, 1, 4)));
}

TEST(InitTest, NormalDrawsHaveTheAskedMomentsAndDifferByCall) {
  Init init(7, 3);
  const torch::Tensor a = init.Normal({1 << 18}, 2.0).to(torch::kDouble);
  const torch::Tensor b = init.Normal({1 << 18}, 2.0).to(torch::kDouble);
  const double n = a.numel();
  // Sampling error of the mean (sigma / sqrt n) and of the variance
  // (sigma^2 sqrt(2 / n)); six of each hold with overwhelming probability.
  EXPECT_NEAR(a.mean().item<double>(), 0.0, 6 * 2.0 / std::sqrt(n));
  EXPECT_NEAR(a.var().item<double>(), 4.0, 6 * 4.0 * std::sqrt(2.0 / n));
  EXPECT_NEAR(a.pow(4).mean().item<double>() / 16.0, 3.0, 0.1);  // a normal's kurtosis
  EXPECT_LT(std::abs((a * b).mean().item<double>()), 6 * 4.0 / std::sqrt(n));
  const torch::Tensor u = Init(7, 4).Uniform({1 << 16}, -1.0, 3.0).to(torch::kDouble);
  EXPECT_GE(u.min().item<double>(), -1.0);
  EXPECT_LT(u.max().item<double>(), 3.0);
  EXPECT_NEAR(u.mean().item<double>(), 1.0, 6 * (4.0 / std::sqrt(12.0)) / std::sqrt(double(u.numel())));
}

TEST(InitTest, DeferredDrawsAreTheEagerOnes) {
  Init eager(11, 2), deferred(11, 2, /*deferred=*/true);
  const torch::Tensor e1 = eager.Normal({4, 5}, 1.0), e2 = eager.Normal({3}, 0.1);
  const torch::Tensor d1 = deferred.Normal({4, 5}, 1.0), d2 = deferred.Normal({3}, 0.1);
  EXPECT_TRUE(d1.is_meta());
  const std::vector<DeferredNormal> made = deferred.TakeDeferred();
  ASSERT_EQ(made.size(), 2u);
  EXPECT_TRUE(torch::equal(NormalValuesAt(made[0].key, made[0].std, d1), e1));
  EXPECT_TRUE(torch::equal(NormalValuesAt(made[1].key, made[1].std, d2.narrow(0, 1, 2)), e2.narrow(0, 1, 2)));
  EXPECT_TRUE(deferred.TakeDeferred().empty());
}

TEST(InitTest, MaterializeFillsTheParameterObjectsInPlace) {
  torch::nn::Module module;
  Init init(5, 1, /*deferred=*/true);
  torch::Tensor w = module.register_parameter("w", init.Normal({8, 6}, 1.0));
  torch::Tensor frozen = module.register_parameter("frozen", init.Normal({4}, 1.0), /*requires_grad=*/false);
  const std::vector<DeferredNormal> made = init.TakeDeferred();
  {
    torch::NoGradGuard no_grad;
    w.set_data(KeepSlice(w, 1, 2, 3));  // what a shard keeps
  }
  const c10::TensorImpl* impl = w.unsafeGetTensorImpl();
  ASSERT_TRUE(Materialize(module, made).ok());
  const torch::Tensor held = module.named_parameters()["w"];
  EXPECT_EQ(held.unsafeGetTensorImpl(), impl);
  EXPECT_FALSE(held.is_meta());
  EXPECT_TRUE(held.requires_grad());
  EXPECT_FALSE(module.named_parameters()["frozen"].requires_grad());
  EXPECT_TRUE(torch::equal(held, Init(5, 1).Normal({8, 6}, 1.0).narrow(1, 2, 3)));
  // The parameter trains like any other.
  (held * held).sum().backward();
  EXPECT_TRUE(torch::allclose(held.grad(), 2 * held));

  torch::nn::Module stray;
  stray.register_parameter("orphan", Meta({2}));
  const Status refused = Materialize(stray, made);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("orphan"), std::string::npos);
}

TEST(InitTest, ADeferredModelMaterialisesToTheEagerOne) {
  RealFileSystem fs;
  auto preset = PresetCatalog(fs, DefaultPresetDir()).Model("kimi-k3-debug");
  ASSERT_TRUE(preset.ok()) << preset.status().message();
  const ModelSpec& spec = *preset;
  ModelOptions options;
  options.seed = 3;
  auto eager = BuildModel(spec, options);
  options.deferred_init = true;
  auto deferred = BuildModel(spec, options);
  ASSERT_TRUE(eager.ok() && deferred.ok());
  ASSERT_TRUE((*deferred)->Materialize().ok());
  const auto want = (*eager)->named_parameters();
  for (const auto& p : (*deferred)->named_parameters()) {
    ASSERT_FALSE(p.value().is_meta()) << p.key();
    EXPECT_TRUE(torch::equal(p.value(), want[p.key()])) << p.key();
  }
}

}  // namespace
}  // namespace kp::runtime
