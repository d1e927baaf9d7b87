// MultiTensorAdamW against torch::optim::AdamW: the same parameters and
// state bit for bit over steps with two groups (decay and none), a changing
// learning rate, a parameter that misses a step's gradient (so step counts
// differ inside a group), and a state handed across through save/load.
#include "runtime/train/multi_tensor_adamw.h"

#include <gtest/gtest.h>

#include <sstream>

namespace kp::runtime {
namespace {

std::vector<torch::Tensor> MakeParams() {
  torch::manual_seed(3);
  return {torch::randn({6, 5}), torch::randn({7}), torch::randn({3, 4, 2}), torch::randn({5})};
}

std::vector<torch::optim::OptimizerParamGroup> Groups(const std::vector<torch::Tensor>& p) {
  auto options = [](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> g;
  g.emplace_back(std::vector<torch::Tensor>{p[0], p[2]}, options(0.1));
  g.emplace_back(std::vector<torch::Tensor>{p[1], p[3]}, options(0.0));
  return g;
}

// Step `step`'s gradients, the same for both runs; parameter 2 gets none at step 1.
void SetGrads(const std::vector<torch::Tensor>& params, int step) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    torch::manual_seed(100 * step + static_cast<int>(i));
    params[i].mutable_grad() = (step == 1 && i == 2) ? torch::Tensor() : torch::randn_like(params[i]);
  }
}

void Train(torch::optim::Optimizer& opt, const std::vector<torch::Tensor>& params, int from, int to) {
  for (int s = from; s < to; ++s) {
    for (auto& group : opt.param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(1e-2 / (1 + s));
    SetGrads(params, s);
    opt.step();
  }
}

std::vector<torch::Tensor> Leaves() {
  std::vector<torch::Tensor> p = MakeParams();
  for (auto& t : p) t.requires_grad_(true);
  return p;
}

TEST(MultiTensorAdamWTest, EqualsAdamWBitForBit) {
  // Buckets of 10 elements: every parameter (30, 7, 24, 5 elements) updates
  // alone; the default bound: each group in one update.
  for (std::int64_t bucket : {std::int64_t{10}, std::int64_t{1} << 26}) {
    const std::vector<torch::Tensor> a = Leaves(), b = Leaves();
    torch::optim::AdamW reference(Groups(a));
    MultiTensorAdamW multi(Groups(b), {}, bucket);
    Train(reference, a, 0, 6);
    Train(multi, b, 0, 6);
    for (std::size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i << ", buckets of " << bucket;
    // The parameters moved: this compares an update, not two copies of the start.
    EXPECT_FALSE(torch::equal(a[0], MakeParams()[0]));
  }
}

TEST(MultiTensorAdamWTest, ContinuesFromAnAdamWCheckpoint) {
  const std::vector<torch::Tensor> a = Leaves(), b = Leaves();
  torch::optim::AdamW reference(Groups(a));
  Train(reference, a, 0, 3);
  torch::serialize::OutputArchive out;
  reference.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < a.size(); ++i) b[i].copy_(a[i]);
  }
  MultiTensorAdamW multi(Groups(b));
  torch::serialize::InputArchive in;
  std::istringstream read(bytes.str());
  in.load_from(read);
  multi.load(in);
  Train(reference, a, 3, 6);
  Train(multi, b, 3, 6);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
}

// On a GPU the fp32 updates take PyTorch's fused kernel (LibTorch 2.1+):
// equal to AdamW's there within fp32 rounding.
TEST(MultiTensorAdamWTest, OnTheGpuEqualsAdamWWithinRounding) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  std::vector<torch::Tensor> a = Leaves(), b = Leaves();
  for (auto* list : {&a, &b})
    for (auto& t : *list) t = t.detach().to(torch::kCUDA).requires_grad_(true);
  torch::optim::AdamW reference(Groups(a));
  MultiTensorAdamW multi(Groups(b));
  for (int s = 0; s < 6; ++s) {
    for (auto* list : {&a, &b})
      for (std::size_t i = 0; i < list->size(); ++i) {
        torch::manual_seed(100 * s + static_cast<int>(i));
        (*list)[i].mutable_grad() = torch::randn((*list)[i].sizes()).to(torch::kCUDA);
      }
    reference.step();
    multi.step();
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double scale = a[i].abs().max().item<double>();
    EXPECT_LT((a[i] - b[i]).abs().max().item<double>(), 1e-6 * scale) << i;
  }
}

// A gradient scale (clipping's) folded into the step equals scaling the
// gradients first: bit for bit on the CPU, within rounding in the fused
// GPU kernel (which divides by the inverse).
TEST(MultiTensorAdamWTest, AScaleInTheStepEqualsScaledGradients) {
  std::vector<torch::Device> devices = {torch::kCPU};
  if (torch::cuda::is_available()) devices.push_back(torch::kCUDA);
  for (const torch::Device& device : devices) {
    std::vector<torch::Tensor> a = Leaves(), b = Leaves();
    for (auto* list : {&a, &b})
      for (auto& t : *list) t = t.detach().to(device).requires_grad_(true);
    torch::optim::AdamW reference(Groups(a));
    MultiTensorAdamW multi(Groups(b));
    for (int s = 0; s < 6; ++s) {
      const double scale = s % 2 == 0 ? 0.3 + 0.1 * s : 1.0;
      SetGrads(a, s);
      SetGrads(b, s);
      for (auto* list : {&a, &b})
        for (auto& t : *list)
          if (t.grad().defined()) t.mutable_grad() = t.grad().to(device);
      for (auto& t : a)
        if (t.grad().defined()) t.grad().mul_(scale);
      multi.ScaleGradientsInNextStep(scale);
      reference.step();
      multi.step();
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (device.is_cpu()) {
        EXPECT_TRUE(torch::equal(a[i], b[i])) << i;
      } else {
        EXPECT_LT((a[i] - b[i]).abs().max().item<double>(), 1e-6 * a[i].abs().max().item<double>()) << i;
      }
    }
  }
}

}  // namespace
}  // namespace kp::runtime
