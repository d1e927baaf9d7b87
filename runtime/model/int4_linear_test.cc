// The torch INT4 form against weights/int4.h's, which is written from the
// compressed-tensors format (and checked there against it); Int4Linear
// against an fp64 product of the same dequantized weight.
#include "runtime/model/int4_linear.h"

#include <cstring>

#include <gtest/gtest.h>

#include "runtime/comm/cpu_memory.h"
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

}  // namespace
}  // namespace kp::runtime
