// The torch INT4 form against weights/int4.h's, which is written from the
// compressed-tensors format (and checked there against it); Int4Linear
// against an fp64 product of the same dequantized weight.
#include "runtime/model/int4_linear.h"

#include <cstring>

#include <gtest/gtest.h>

#include "runtime/comm/cpu_memory.h"
#include "runtime/model/init.h"
#include "runtime/model/layers.h"
#include "runtime/comm/device.h"
#include "weights/int4.h"

namespace kp::runtime {
namespace {

// A weight with the cases rounding can get wrong: exact halves of the step
// (+-0.5, +-2.5 after scaling), a group of zeros, groups whose largest is
// negative (-> -8) or positive (-> clamped 7).
torch::Tensor AwkwardWeight(std::int64_t rows, std::int64_t cols) {
  torch::manual_seed(7);
  torch::Tensor w = torch::randn({rows, cols});
  w.narrow(0, 0, 1).narrow(1, 0, 32).zero_();
  // Row 1, group 0: largest 7.5 -> scale 1 exactly, so 0.5, 2.5, -1.5 are
  // ties of the rounding.
  w[1].narrow(0, 0, 32).copy_(torch::tensor({7.5f, 0.5f, 2.5f, -1.5f, -0.5f, 3.49999976f, 0.49999997f, -7.5f})
                                  .repeat({4}));
  w[2].narrow(0, 0, 32).mul_(-1).abs_().neg_();  // all negative: the largest maps to -8
  return w;
}

TEST(Int4LinearTest, QuantizesToTheFormatsBitsExactly) {
  const std::int64_t rows = 6, cols = 96;
  const torch::Tensor w = AwkwardWeight(rows, cols);
  const Int4Weight got = QuantizeInt4Weight(w);
  ASSERT_EQ(got.packed.sizes(), (std::vector<std::int64_t>{rows, cols / 8}));
  ASSERT_EQ(got.scales.sizes(), (std::vector<std::int64_t>{rows, cols / 32}));
  ASSERT_EQ(got.scales.scalar_type(), torch::kBFloat16);
  const torch::Tensor wc = w.contiguous();
  const std::vector<float> flat(wc.data_ptr<float>(), wc.data_ptr<float>() + wc.numel());
  const PackedInt4 want = QuantizeInt4(flat, rows, cols, "w").value();
  const torch::Tensor packed = got.packed.contiguous();
  for (std::int64_t i = 0; i < packed.numel(); ++i)
    ASSERT_EQ(packed.data_ptr<std::int32_t>()[i], want.packed[i]) << "word " << i;
  const torch::Tensor scales = got.scales.contiguous();
  for (std::int64_t i = 0; i < scales.numel(); ++i) {
    std::uint16_t bits;
    std::memcpy(&bits, scales.data_ptr<at::BFloat16>() + i, 2);
    ASSERT_EQ(bits, want.scales[i]) << "scale " << i;
  }
  // And back: the format's dequantization, bit for bit in fp32.
  const std::vector<float> back = DequantizeInt4(want, "w").value();
  EXPECT_TRUE(torch::equal(DequantizeInt4Weight(got, torch::kFloat), torch::tensor(back).view({rows, cols})));
}

TEST(Int4LinearTest, BanksQuantizeExpertByExpert) {
  const torch::Tensor bank = torch::randn({3, 4, 64});
  const Int4Weight all = QuantizeInt4Weight(bank);
  for (std::int64_t e = 0; e < 3; ++e) {
    const Int4Weight one = QuantizeInt4Weight(bank[e]);
    EXPECT_TRUE(torch::equal(all.packed[e], one.packed));
    EXPECT_TRUE(torch::equal(all.scales[e], one.scales));
  }
  EXPECT_THROW(QuantizeInt4Weight(torch::randn({4, 48})), std::invalid_argument);
}

// fp32 products of length C: each output is within C ulps-ish of fp64; the
// bound 1e-5 relative to sum |x||w| holds for C = 256 on any BLAS.
TEST(Int4LinearTest, ForwardAndInputGradientAreTheDequantizedProducts) {
  torch::manual_seed(3);
  const Int4Weight w = QuantizeInt4Weight(torch::randn({40, 256}));
  const torch::Tensor w64 = DequantizeInt4Weight(w, torch::kDouble);
  const torch::Tensor x = torch::randn({5, 256}, torch::requires_grad());
  const torch::Tensor dy = torch::randn({5, 40});
  const torch::Tensor y = Int4Linear(x, w);
  y.backward(dy);
  const torch::Tensor want_y = torch::matmul(x.detach().to(torch::kDouble), w64.t());
  const torch::Tensor scale_y = torch::matmul(x.detach().abs().to(torch::kDouble), w64.abs().t());
  EXPECT_LE(((y.to(torch::kDouble) - want_y).abs() / scale_y).max().item<double>(), 1e-5);
  const torch::Tensor want_dx = torch::matmul(dy.to(torch::kDouble), w64);
  const torch::Tensor scale_dx = torch::matmul(dy.abs().to(torch::kDouble), w64.abs());
  EXPECT_LE(((x.grad().to(torch::kDouble) - want_dx).abs() / scale_dx).max().item<double>(), 1e-5);
  EXPECT_FALSE(w.packed.requires_grad());
}

// What an INT4 base saves: after the forward, the graph holds the packed
// weight (already live) and no dequantized copy. A plain linear on the
// dequantized weight keeps its [rows, cols] fp32 matrix for the backward.
TEST(Int4LinearTest, TheForwardKeepsNoDequantizedWeight) {
  InstallCpuMemoryCounter();
  const torch::Device cpu(torch::kCPU);
  const std::int64_t rows = 1024, cols = 1024;
  const Int4Weight w = QuantizeInt4Weight(torch::randn({rows, cols}));
  const torch::Tensor x = torch::randn({4, cols}, torch::requires_grad());
  const double dense = rows * cols * 4.0;
  const double before = AllocatedMemoryBytes(cpu);
  torch::Tensor y = Int4Linear(x, w);
  const double kept = AllocatedMemoryBytes(cpu) - before;
  EXPECT_LT(kept, 0.05 * dense) << kept;  // the output, 16 KB
  y = torch::Tensor();
  const double before_plain = AllocatedMemoryBytes(cpu);
  // The plain product on a dequantized temporary keeps it for x's gradient.
  const torch::Tensor plain = torch::linear(x, DequantizeInt4Weight(w, torch::kFloat));
  EXPECT_GT(AllocatedMemoryBytes(cpu) - before_plain, 0.9 * dense);
}

// The bank on its INT4 base is the bank on the dequantized weights: the
// same outputs and the same LoRA gradients (fp32 products of length 64, so
// within 1e-5 of each other relative to their size), with the float
// parameters emptied and the base's buffers under the bank's names.
TEST(Int4LinearTest, AnExpertBankOnItsInt4BaseIsTheBankOnTheDequantizedWeights) {
  LoraOptions lora;
  lora.rank = 4;
  lora.alpha = 8;
  auto make = [&] {
    Init init(5);
    auto bank = std::make_shared<ExpertBankImpl>(3, 64, 96, 0.05, 0.05, init);
    Init lora_init(6);
    bank->AddLora(lora, lora_init);
    torch::NoGradGuard no_grad;
    torch::manual_seed(4);  // both banks get the same B
    for (auto& p : bank->named_parameters())
      if (p.key().find("lora_b") != std::string::npos) p.value().normal_(0, 0.1);  // B = 0 would hide the adapters
    return bank;
  };
  auto int4 = make(), reference = make();
  ASSERT_TRUE(int4->QuantizeBase().ok());
  ASSERT_TRUE(int4->int4_base());
  EXPECT_EQ(int4->ffn(), 96);
  {
    torch::NoGradGuard no_grad;
    const auto buffers = int4->named_buffers();
    for (const char* name : {"gate", "up", "down"}) {
      EXPECT_EQ(int4->named_parameters()[name].numel(), 0) << name;
      const Int4Weight q{buffers[std::string(name) + "_packed"], buffers[std::string(name) + "_scale"]};
      reference->named_parameters()[name].copy_(DequantizeInt4Weight(q, torch::kFloat));
    }
  }
  torch::manual_seed(9);
  const torch::Tensor x = torch::randn({10, 64});
  const std::vector<std::int64_t> counts = {4, 0, 6};
  const torch::Tensor dy = torch::randn({10, 64});
  const torch::Tensor y = int4->forward(x, counts), want = reference->forward(x, counts);
  EXPECT_LE((y - want).abs().max().item<double>(), 1e-5 * want.abs().max().item<double>());
  (y * dy).sum().backward();
  (want * dy).sum().backward();
  for (const char* name : {"gate_lora_a", "gate_lora_b", "up_lora_a", "down_lora_a", "down_lora_b"}) {
    const torch::Tensor g = int4->named_parameters()[name].grad(), r = reference->named_parameters()[name].grad();
    ASSERT_TRUE(g.defined()) << name;
    EXPECT_LE((g - r).abs().max().item<double>(), 1e-5 * r.abs().max().item<double>()) << name;
  }
  EXPECT_THROW(int4->Merge(), std::invalid_argument);
}

}  // namespace
}  // namespace kp::runtime
