// The FP8 recipe against references written from the OCP FP8 specification
// and DeepSeek-V3's description: the e4m3 values decoded from all 256 bit
// patterns, the nearest one found by a scan; block scales from a loop over
// the tiles; the products and gradients in fp64 from those operands.
#include "runtime/model/fp8_linear.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/kernels/fp8_gemm.h"

namespace kp::runtime {
namespace {

// The non-negative finite e4m3fn values in the order of their codes 0..126
// (which is ascending): exponent field e (bias 7), mantissa m; e = 0 is
// subnormal (m / 8 x 2^-6); 0x7f (e = 15, m = 7) is NaN.
std::vector<float> E4m3Values() {
  std::vector<float> out;
  for (int code = 0; code < 127; ++code) {
    const int e = code >> 3, m = code & 7;
    out.push_back(e == 0 ? std::ldexp(m / 8.0f, -6) : std::ldexp(1.0f + m / 8.0f, e - 7));
  }
  return out;
}

// The nearest e4m3 value by a scan, ties to the even code (the even
// mantissa); beyond 448, 448.
float NearestE4m3(float v) {
  static const std::vector<float> grid = E4m3Values();
  const float a = std::min(std::fabs(v), grid.back());
  std::size_t best = 0;
  for (std::size_t i = 1; i < grid.size(); ++i) {
    const double d = std::fabs(double(grid[i]) - a), d_best = std::fabs(double(grid[best]) - a);
    if (d < d_best || (d == d_best && i % 2 == 0)) best = i;
  }
  return std::copysign(grid[best], v);
}

std::vector<float> Values(const torch::Tensor& t) {
  const torch::Tensor c = t.to(torch::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

TEST(Fp8Test, TheGridHas448AtTheTopAnd2ToTheMinus9AtTheBottom) {
  const std::vector<float> grid = E4m3Values();
  EXPECT_EQ(grid.back(), 448.0f);
  EXPECT_EQ(grid[1], std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::is_sorted(grid.begin(), grid.end()));
}

TEST(Fp8Test, EveryE4m3ValueIsKept) {
  std::vector<float> both;
  for (float v : E4m3Values()) both.push_back(v), both.push_back(-v);
  const std::vector<float> got = Values(RoundToE4m3(torch::tensor(both)));
  for (std::size_t i = 0; i < both.size(); ++i) EXPECT_EQ(got[i], both[i]) << "at " << both[i];
}

// Every midpoint between neighbours (the ties), a value either side of it,
// random values over the whole range and beyond it.
TEST(Fp8Test, RoundsToTheNearestTiesToEvenAndSaturates) {
  const std::vector<float> grid = E4m3Values();
  std::vector<float> in;
  for (std::size_t i = 0; i + 1 < grid.size(); ++i) {
    const float mid = 0.5f * (grid[i] + grid[i + 1]);
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) in.push_back(v), in.push_back(-v);
  }
  torch::manual_seed(3);
  for (float v : Values(torch::randn({2000}) * torch::pow(2.0, torch::randint(-12, 10, {2000}).to(torch::kFloat))))
    in.push_back(v);
  for (float v : {449.0f, 464.0f, 480.0f, 1e6f, -1e30f}) in.push_back(v);
  const std::vector<float> got = Values(RoundToE4m3(torch::tensor(in)));
  for (std::size_t i = 0; i < in.size(); ++i) EXPECT_EQ(got[i], NearestE4m3(in[i])) << "of " << in[i];
  EXPECT_TRUE(std::isnan(RoundToE4m3(torch::tensor({std::numeric_limits<float>::quiet_NaN()})).item<float>()));
}

// The tiles' scales and values by a loop over the tiles, in fp32 as the
// recipe computes them (a bf16 x read as fp32, which is exact).
torch::Tensor ReferenceBlocks(const torch::Tensor& x, std::int64_t tr, std::int64_t tc) {
  const torch::Tensor c = x.to(torch::kFloat).contiguous();
  const std::int64_t rows = c.size(0), cols = c.size(1);
  const float* in = c.data_ptr<float>();
  torch::Tensor out = torch::empty_like(c);
  float* o = out.data_ptr<float>();
  for (std::int64_t r0 = 0; r0 < rows; r0 += tr)
    for (std::int64_t c0 = 0; c0 < cols; c0 += tc) {
      const std::int64_t r1 = std::min(rows, r0 + tr), c1 = std::min(cols, c0 + tc);
      float amax = 0;
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t k = c0; k < c1; ++k) amax = std::max(amax, std::fabs(in[r * cols + k]));
      const float scale = amax > 0 ? amax / 448.0f : 1.0f;
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t k = c0; k < c1; ++k) o[r * cols + k] = NearestE4m3(in[r * cols + k] / scale) * scale;
    }
  return out;
}

TEST(Fp8Test, BlockScalesAreEachTilesLargestOver448) {
  torch::manual_seed(5);
  torch::Tensor x = torch::randn({150, 300}) * torch::linspace(0.01, 30, 300);
  x.narrow(0, 0, 128).narrow(1, 0, 128).zero_();  // an all-zero block stays zero
  for (auto [tr, tc] : {std::pair<std::int64_t, std::int64_t>{1, 128}, {128, 128}, {128, 1}, {7, 33}}) {
    const torch::Tensor got = FakeQuantizeFp8Blocks(x, tr, tc);
    EXPECT_TRUE(torch::equal(got, ReferenceBlocks(x, tr, tc))) << tr << " x " << tc;
    // e4m3 keeps 3 mantissa bits: a normal value moves by at most 2^-4 of itself.
    const torch::Tensor normal = x.abs() > 1e-2 * x.abs().max();
    EXPECT_LE(((got - x).abs() / x.abs()).masked_select(normal).max().item<float>(), 1.0f / 16) << tr << " x " << tc;
  }
  EXPECT_EQ(FakeQuantizeFp8Blocks(x, 128, 128).narrow(0, 0, 128).narrow(1, 0, 128).abs().max().item<float>(), 0.0f);
}

TEST(Fp8Test, TheLinearAndItsGradientsAreTheRecipesProductsInFp64) {
  torch::manual_seed(11);
  const std::int64_t in = 200, out = 150;
  const torch::Tensor x = torch::randn({3, 100, in}).requires_grad_(true);
  const torch::Tensor w = (torch::randn({out, in}) * 0.05).requires_grad_(true);
  const torch::Tensor y = Fp8Linear(x, w);
  ASSERT_EQ(y.sizes(), (std::vector<std::int64_t>{3, 100, out}));
  const torch::Tensor dy = torch::randn({3, 100, out});
  y.backward(dy);

  const torch::Tensor x2 = x.detach().reshape({-1, in}), dy2 = dy.reshape({-1, out}), wd = w.detach();
  auto fp64 = [](const torch::Tensor& t) { return t.to(torch::kDouble); };
  const torch::Tensor wq = fp64(ReferenceBlocks(wd, 128, 128));
  const torch::Tensor want_y = fp64(ReferenceBlocks(x2, 1, 128)).mm(wq.t());
  const torch::Tensor want_dx = fp64(ReferenceBlocks(dy2, 1, 128)).mm(wq);
  const torch::Tensor want_dw = fp64(ReferenceBlocks(dy2, 128, 1)).t().mm(fp64(ReferenceBlocks(x2, 128, 1)));
  // fp32 sums of 150 to 300 terms: a few ulps of the largest partial sums.
  auto gap = [](const torch::Tensor& got, const torch::Tensor& want) {
    return ((got.to(torch::kDouble) - want).abs().max() / want.abs().max()).item<double>();
  };
  EXPECT_LT(gap(y.detach().reshape({-1, out}), want_y), 1e-6);
  EXPECT_LT(gap(x.grad().reshape({-1, in}), want_dx), 1e-6);
  EXPECT_LT(gap(w.grad(), want_dw), 1e-6);
  // And it is not the full-precision product: FP8 moves it by about 2^-5.
  const double fp8_error = gap(y.detach().reshape({-1, out}), fp64(x2).mm(fp64(wd).t()));
  EXPECT_GT(fp8_error, 1e-3);
  EXPECT_LT(fp8_error, 0.1);
}

TEST(Fp8Test, Bf16InputsGiveBf16Outputs) {
  const torch::Tensor x = torch::randn({4, 64}).to(torch::kBFloat16).requires_grad_(true);
  const torch::Tensor w = torch::randn({32, 64}).to(torch::kBFloat16).requires_grad_(true);
  const torch::Tensor y = Fp8Linear(x, w);
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  y.sum().backward();
  EXPECT_EQ(x.grad().scalar_type(), torch::kBFloat16);
  EXPECT_EQ(w.grad().scalar_type(), torch::kBFloat16);
  EXPECT_THROW(Fp8Linear(x, torch::randn({32, 63})), std::invalid_argument);
}

// On a GPU the emulation's quantised operands are the CPU's bit for bit
// (the rounding is elementwise IEEE arithmetic) and its products agree to
// fp32 rounding.
TEST(Fp8Test, OnTheGpuTheQuantisationIsTheCpusBitForBit) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  torch::manual_seed(13);
  const torch::Tensor x = torch::randn({300, 260}) * torch::linspace(0.01, 30, 260);
  for (auto [tr, tc] : {std::pair<std::int64_t, std::int64_t>{1, 128}, {128, 128}, {128, 1}})
    EXPECT_TRUE(torch::equal(FakeQuantizeFp8Blocks(x.cuda(), tr, tc).cpu(), FakeQuantizeFp8Blocks(x, tr, tc)))
        << tr << " x " << tc;
  const torch::Tensor w = torch::randn({150, 260}) * 0.05;
  const torch::Tensor cpu = Fp8LinearEmulated(x, w), gpu = Fp8LinearEmulated(x.cuda(), w.cuda()).cpu();
  EXPECT_LT(((gpu - cpu).abs().max() / cpu.abs().max()).item<double>(), 1e-5);
}

// On a Hopper GPU Fp8Linear runs on FP8 tensor cores: the forward and both
// gradients against the recipe's products in fp64 over the same quantised
// operands (tokens and widths off the 128 grid, so the padding is crossed).
// The tensor cores sum each 128-wide slice at reduced precision before the
// fp32 scaling (DeepSeek-V3 reports about 14 bits on Hopper): 1e-3 of the
// largest value bounds that, where one e4m3 step of an operand is 2^-4.
TEST(Fp8Test, OnTensorCoresTheLinearIsTheRecipesProductsInFp64) {
  if (!torch::cuda::is_available() || !Fp8GemmApplies(torch::zeros({1}, torch::kCUDA)))
    GTEST_SKIP() << "needs a Hopper GPU and the CUDA kernels";
  torch::manual_seed(17);
  const std::int64_t in = 320, out = 200;
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const torch::Tensor x0 = (torch::randn({2, 150, in}) * torch::linspace(0.1, 4, in)).to(dtype);
    const torch::Tensor w0 = (torch::randn({out, in}) * 0.05).to(dtype);
    const torch::Tensor dy = torch::randn({2, 150, out}).to(dtype);
    const torch::Tensor x = x0.cuda().requires_grad_(true), w = w0.cuda().requires_grad_(true);
    const torch::Tensor y = Fp8Linear(x, w);
    ASSERT_EQ(y.scalar_type(), dtype);
    y.backward(dy.cuda());

    const torch::Tensor x2 = x0.reshape({-1, in}), dy2 = dy.reshape({-1, out});
    auto fp64 = [](const torch::Tensor& t) { return t.to(torch::kDouble); };
    const torch::Tensor wq = fp64(ReferenceBlocks(w0, 128, 128));
    const torch::Tensor want_y = fp64(ReferenceBlocks(x2, 1, 128)).mm(wq.t());
    const torch::Tensor want_dx = fp64(ReferenceBlocks(dy2, 1, 128)).mm(wq);
    const torch::Tensor want_dw = fp64(ReferenceBlocks(dy2, 128, 1)).t().mm(fp64(ReferenceBlocks(x2, 128, 1)));
    // bf16 results round each value by up to 2^-9 of itself on top.
    const double tolerance = dtype == torch::kFloat ? 1e-3 : 1e-3 + 1.0 / 256;
    auto gap = [](const torch::Tensor& got, const torch::Tensor& want) {
      return ((got.cpu().to(torch::kDouble) - want).abs().max() / want.abs().max()).item<double>();
    };
    EXPECT_LT(gap(y.detach().reshape({-1, out}), want_y), tolerance) << c10::toString(dtype);
    EXPECT_LT(gap(x.grad().reshape({-1, in}), want_dx), tolerance) << c10::toString(dtype);
    EXPECT_LT(gap(w.grad(), want_dw), tolerance) << c10::toString(dtype);
    EXPECT_EQ(x.grad().scalar_type(), dtype);
    EXPECT_EQ(w.grad().scalar_type(), dtype);
  }
}

}  // namespace
}  // namespace kp::runtime
