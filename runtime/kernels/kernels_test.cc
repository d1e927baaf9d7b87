// The GPU kernels against the torch forms they replace, computed in fp64 on
// the CPU: KDA's chunked form with the intra-chunk and chunk-scan kernels
// (outputs, final state and every gradient), the recurrent decode kernel,
// the attention-residual depth read, RMSNorm, KDA's preparation kernels
// (alone and in the whole layer), SwiGLU, the grouped expert GEMM
// against the per-expert loop, and the FP8 quantisation and products. Tests that need a GPU and this build's
// kernels skip with a message elsewhere; the CPU ones always run.
#include <numeric>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include <torch/torch.h>

#include "runtime/model/attention.h"
#include "runtime/kernels/kernels.h"
#include "runtime/model/fp8_linear.h"
#include "runtime/model/layers.h"
#include "runtime/model/model.h"

namespace kp::runtime {
namespace {

torch::Tensor Random(at::IntArrayRef shape, std::uint64_t seed) { return Init(seed).Normal(shape, 1.0).to(torch::kDouble); }

// ||got - want|| / ||want||; where `want` is exactly zero (a read over one
// value has no gradient for its query), the largest |got| instead.
double RelativeError(const torch::Tensor& got, const torch::Tensor& want) {
  const torch::Tensor w = want.to(torch::kCPU, torch::kDouble), g = got.to(torch::kCPU, torch::kDouble);
  const double norm = w.norm().item<double>();
  return norm == 0 ? g.abs().max().item<double>() : (g - w).norm().item<double>() / norm;
}

#define SKIP_WITHOUT_CUDA_KERNELS()                                                   \
  if (!CudaKernelsBuilt() || !torch::cuda::is_available())                            \
  GTEST_SKIP() << "needs a CUDA build of the KDA kernels and a GPU (scripts/gpu_build.sh)"

// Inputs as KdaImpl makes them: unit k, q scaled by 1/sqrt(dk), g <= 0 from a
// softplus, beta in (0, 1); `decay` scales g (20: e^-160 per step at worst).
struct KdaInputs {
  torch::Tensor q, k, v, g, beta, s0;
  std::vector<torch::Tensor> All() const { return {q, k, v, g, beta, s0}; }
};

KdaInputs RandomKda(std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t dk, std::int64_t dv, double decay,
                    std::uint64_t seed) {
  auto unit = [](const torch::Tensor& x) { return x / x.norm(2, -1, true); };
  KdaInputs in;
  in.q = unit(Random({b, t, h, dk}, seed)) / std::sqrt(double(dk));
  in.k = unit(Random({b, t, h, dk}, seed + 1));
  in.v = Random({b, t, h, dv}, seed + 2);
  in.g = -torch::softplus(Random({b, t, h, dk}, seed + 3) - 2.0) * decay;
  in.beta = torch::sigmoid(Random({b, t, h}, seed + 4));
  in.s0 = Random({b, h, dk, dv}, seed + 5) * 0.1;
  return in;
}

KdaInputs To(const KdaInputs& in, torch::Device device, torch::Dtype dtype) {
  auto to = [&](const torch::Tensor& x) { return x.to(device, dtype).detach().requires_grad_(true); };
  return {to(in.q), to(in.k), to(in.v), to(in.g), to(in.beta), to(in.s0)};
}

struct KdaResult {
  torch::Tensor out, state;
  std::vector<torch::Tensor> grads;  // q, k, v, g, beta, s0
};

// L = <o, R1> + <S_T, R2> with fixed random R1, R2: every output and the
// final state carry gradient.
KdaResult RunChunked(const KdaInputs& in, std::int64_t chunk, bool fused, KdaMath math = KdaMath::kFp32) {
  KdaResult r;
  r.out = KdaChunked(in.q, in.k, in.v, in.g, in.beta, chunk, in.s0, &r.state, fused, math);
  const auto opts = r.out.options();
  const torch::Tensor w1 = Random(r.out.sizes(), 90).to(opts), w2 = Random(r.state.sizes(), 91).to(opts);
  const torch::Tensor loss = (r.out * w1).sum() + (r.state * w2).sum();
  r.grads = torch::autograd::grad({loss}, in.All());
  return r;
}

TEST(KdaKernelTest, ChunkedFormWithTheKernelMatchesFp64InOutputsStateAndGradients) {
  SKIP_WITHOUT_CUDA_KERNELS();
  const char* names[] = {"dq", "dk", "dv", "dg", "dbeta", "ds0"};
  struct Case {
    std::int64_t t, dk, dv, chunk;
    bool scan;  // whether the scan kernel takes it too (dk 96: the intra-chunk kernel and the torch loop)
  };
  // Partial last chunks, one short chunk, and the kimi-1b head shape.
  for (const Case& c : {Case{37, 64, 64, 16, true}, Case{100, 128, 128, 32, true}, Case{130, 128, 96, 64, true},
                        Case{20, 64, 32, 64, true}, Case{33, 96, 64, 32, false}}) {
    const auto cuda = torch::device(torch::kCUDA);
    ASSERT_TRUE(KdaIntraKernelApplies(torch::zeros({1, c.chunk, c.dk}, cuda)));
    ASSERT_EQ(KdaScanKernelApplies(torch::zeros({1, 1, 1, c.chunk, c.dv}, cuda),
                                   torch::zeros({1, 1, 1, c.chunk, c.dk}, cuda)),
              c.scan);
    const KdaInputs base = RandomKda(2, c.t, 3, c.dk, c.dv, 1.0, 7 + c.t);
    const KdaResult want = RunChunked(To(base, torch::kCPU, torch::kDouble), c.chunk, false);
    const KdaResult got = RunChunked(To(base, torch::kCUDA, torch::kFloat), c.chunk, true);
    const std::string where = "T " + std::to_string(c.t) + " dk " + std::to_string(c.dk) + " chunk " +
                              std::to_string(c.chunk);
    EXPECT_LT(RelativeError(got.out, want.out), 1e-5) << where;
    EXPECT_LT(RelativeError(got.state, want.state), 1e-5) << where;
    for (std::size_t i = 0; i < want.grads.size(); ++i)
      EXPECT_LT(RelativeError(got.grads[i], want.grads[i]), 1e-4) << names[i] << ", " << where;
  }
}

// No initial state and no final state wanted (the training forward's case:
// the scan's backward starts from zeros), and a chunk of 8, which no kernel
// takes: the torch form runs on the GPU.
TEST(KdaKernelTest, WithoutStatesAndInTheTorchFallback) {
  SKIP_WITHOUT_CUDA_KERNELS();
  const KdaInputs base = RandomKda(2, 45, 2, 128, 64, 1.0, 13);
  for (std::int64_t chunk : {32, 8}) {
    std::vector<torch::Tensor> grads[2];
    torch::Tensor outs[2];
    int i = 0;
    for (const KdaInputs& in : {To(base, torch::kCPU, torch::kDouble), To(base, torch::kCUDA, torch::kFloat)}) {
      outs[i] = KdaChunked(in.q, in.k, in.v, in.g, in.beta, chunk, {}, nullptr, /*fused=*/i == 1);
      const torch::Tensor w = Random(outs[i].sizes(), 92).to(outs[i].options());
      grads[i] = torch::autograd::grad({(outs[i] * w).sum()}, {in.q, in.k, in.v, in.g, in.beta});
      ++i;
    }
    EXPECT_LT(RelativeError(outs[1], outs[0]), 1e-5) << "chunk " << chunk;
    for (std::size_t g = 0; g < grads[0].size(); ++g)
      EXPECT_LT(RelativeError(grads[1][g], grads[0][g]), 1e-4) << "chunk " << chunk << " grad " << g;
  }
}

TEST(KdaKernelTest, StrongDecayStaysFiniteAndExact) {
  SKIP_WITHOUT_CUDA_KERNELS();
  const KdaInputs base = RandomKda(1, 70, 2, 64, 64, 20.0, 3);
  const KdaResult want = RunChunked(To(base, torch::kCPU, torch::kDouble), 64, false);
  const KdaResult got = RunChunked(To(base, torch::kCUDA, torch::kFloat), 64, true);
  EXPECT_TRUE(torch::isfinite(got.out).all().item<bool>());
  for (const torch::Tensor& g : got.grads) EXPECT_TRUE(torch::isfinite(g).all().item<bool>());
  EXPECT_LT(RelativeError(got.out, want.out), 1e-5);
  EXPECT_LT(RelativeError(got.grads[3], want.grads[3]), 1e-4);  // dg, where the exponentials are
}

TEST(KdaKernelTest, IsDeterministic) {
  SKIP_WITHOUT_CUDA_KERNELS();
  const KdaInputs base = RandomKda(2, 96, 2, 128, 128, 1.0, 11);
  const KdaResult a = RunChunked(To(base, torch::kCUDA, torch::kFloat), 32, true);
  const KdaResult b = RunChunked(To(base, torch::kCUDA, torch::kFloat), 32, true);
  EXPECT_TRUE(torch::equal(a.out, b.out));
  for (std::size_t i = 0; i < a.grads.size(); ++i) EXPECT_TRUE(torch::equal(a.grads[i], b.grads[i])) << i;
}

// The chunked core on tensor cores (the scan and the batched products in
// TF32, fp32 accumulation and state) against fp64: within TF32's rounding
// (2^-11 relative per operand), not bit-equal to the fp32 kernels (so the
// tensor cores did run), and deterministic. dv 96 (no multiple of 64) runs
// the fp32 scan with the tensor-core products.
TEST(KdaKernelTest, OnTensorCoresTheScanIsFp64WithinTf32Rounding) {
  SKIP_WITHOUT_CUDA_KERNELS();
  const char* names[] = {"dq", "dk", "dv", "dg", "dbeta", "ds0"};
  struct Case {
    std::int64_t t, dk, dv, chunk;
    double decay;
  };
  for (const Case& c : {Case{37, 64, 64, 16, 1.0}, Case{100, 128, 128, 32, 1.0}, Case{130, 128, 64, 64, 1.0},
                        Case{70, 64, 128, 64, 20.0}, Case{45, 128, 96, 32, 1.0}}) {
    const KdaInputs base = RandomKda(2, c.t, 3, c.dk, c.dv, c.decay, 23 + c.t);
    const KdaResult want = RunChunked(To(base, torch::kCPU, torch::kDouble), c.chunk, false);
    const KdaResult fp32 = RunChunked(To(base, torch::kCUDA, torch::kFloat), c.chunk, true, KdaMath::kFp32);
    const KdaResult got = RunChunked(To(base, torch::kCUDA, torch::kFloat), c.chunk, true, KdaMath::kTensorCores);
    const KdaResult again = RunChunked(To(base, torch::kCUDA, torch::kFloat), c.chunk, true, KdaMath::kTensorCores);
    const std::string where = "T " + std::to_string(c.t) + " dk " + std::to_string(c.dk) + " dv " +
                              std::to_string(c.dv) + " chunk " + std::to_string(c.chunk);
    EXPECT_LT(RelativeError(got.out, want.out), 5e-3) << where;
    EXPECT_LT(RelativeError(got.state, want.state), 5e-3) << where;
    for (std::size_t i = 0; i < want.grads.size(); ++i) {
      EXPECT_TRUE(torch::isfinite(got.grads[i]).all().item<bool>()) << names[i] << ", " << where;
      EXPECT_LT(RelativeError(got.grads[i], want.grads[i]), 1e-2) << names[i] << ", " << where;
      EXPECT_TRUE(torch::equal(got.grads[i], again.grads[i])) << names[i] << ", " << where;
    }
    EXPECT_TRUE(torch::equal(got.out, again.out)) << where;
    EXPECT_GT(RelativeError(got.out, fp32.out), 1e-7) << where << ": the fp32 form ran";
  }
}

// KdaStateScan alone on tensor cores (fp32 chunk-start states: the form a
// chunked core takes when its products kernel refuses the shape) against
// the fp32 scan: outputs and every input's gradient within TF32's rounding.
TEST(KdaKernelTest, TheStateScanOnTensorCoresIsTheFp32ScanWithinTf32Rounding) {
  SKIP_WITHOUT_CUDA_KERNELS();
  const std::int64_t b = 2, h = 2, n = 3, c = 64, dk = 128, dv = 128;
  auto leaf = [](const torch::Tensor& x) { return x.to(torch::kCUDA, torch::kFloat).requires_grad_(true); };
  const torch::Tensor w0 = Random({b, h, n, c, dv}, 150), y0 = Random({b, h, n, c, dk}, 151) * 0.05,
                      k0 = Random({b, h, n, c, dk}, 152) * 0.05,
                      d0 = torch::exp(-torch::softplus(Random({b, h, n, dk}, 153))), s00 = Random({b, h, dk, dv}, 154);
  const torch::Tensor r1 = Random({b, h, n, c, dv}, 155), r2 = Random({b, h, n, dk, dv}, 156),
                      r3 = Random({b, h, dk, dv}, 157);
  KdaScanResult results[2];
  std::vector<torch::Tensor> grads[2];
  for (int i = 0; i < 2; ++i) {
    const std::vector<torch::Tensor> in = {leaf(w0), leaf(y0), leaf(k0), leaf(d0), leaf(s00)};
    results[i] = KdaStateScan(in[0], in[1], in[2], in[3], in[4], i == 0 ? KdaMath::kFp32 : KdaMath::kTensorCores);
    const torch::Tensor loss = (results[i].u * r1.to(torch::kCUDA, torch::kFloat)).sum() +
                               (results[i].starts * r2.to(torch::kCUDA, torch::kFloat)).sum() +
                               (results[i].final_state * r3.to(torch::kCUDA, torch::kFloat)).sum();
    grads[i] = torch::autograd::grad({loss}, in);
  }
  EXPECT_EQ(results[1].starts.scalar_type(), torch::kFloat);
  EXPECT_LT(RelativeError(results[1].u, results[0].u), 5e-3);
  EXPECT_LT(RelativeError(results[1].starts, results[0].starts), 5e-3);
  EXPECT_LT(RelativeError(results[1].final_state, results[0].final_state), 5e-3);
  EXPECT_GT(RelativeError(results[1].u, results[0].u), 1e-7) << "the fp32 scan ran";
  const char* names[] = {"dw", "dy", "dk_to_end", "ddecay", "ds0"};
  for (int i = 0; i < 5; ++i) EXPECT_LT(RelativeError(grads[1][i], grads[0][i]), 1e-2) << names[i];
}

TEST(KdaKernelTest, RecurrentKernelMatchesFp64PrefillThenDecode) {
  SKIP_WITHOUT_CUDA_KERNELS();
  torch::NoGradGuard no_grad;
  const KdaInputs base = RandomKda(3, 9, 2, 128, 64, 1.0, 5);
  torch::Tensor want_state;
  const torch::Tensor want = KdaRecurrent(base.q, base.k, base.v, base.g, base.beta, base.s0, &want_state);
  const KdaInputs gpu = To(base, torch::kCUDA, torch::kFloat);
  ASSERT_TRUE(KdaRecurrentKernelApplies(gpu.q, gpu.v));
  // Four tokens at once, then one at a time, as a rollout decodes.
  torch::Tensor state;
  std::vector<torch::Tensor> outs = {KdaRecurrentKernel(
      gpu.q.narrow(1, 0, 4), gpu.k.narrow(1, 0, 4), gpu.v.narrow(1, 0, 4), gpu.g.narrow(1, 0, 4),
      gpu.beta.narrow(1, 0, 4), gpu.s0, &state)};
  for (std::int64_t t = 4; t < 9; ++t)
    outs.push_back(KdaRecurrentKernel(gpu.q.narrow(1, t, 1), gpu.k.narrow(1, t, 1), gpu.v.narrow(1, t, 1),
                                      gpu.g.narrow(1, t, 1), gpu.beta.narrow(1, t, 1), state, &state));
  EXPECT_LT(RelativeError(torch::cat(outs, 1), want), 1e-6);
  EXPECT_LT(RelativeError(state, want_state), 1e-6);
  // A first call with no state yet starts from zeros.
  torch::Tensor fresh;
  const torch::Tensor from_zero = KdaRecurrent(base.q, base.k, base.v, base.g, base.beta, {}, &want_state);
  EXPECT_LT(RelativeError(KdaRecurrentKernel(gpu.q, gpu.k, gpu.v, gpu.g, gpu.beta, {}, &fresh), from_zero), 1e-6);
  EXPECT_LT(RelativeError(fresh, want_state), 1e-6);
}

// ------------------------------------------------------------ batched TF32 products

// Every pairing of row-major and transposed operands, a product that fills
// no tile whole (M 80, N 72, K 40 against 32 x 64 tiles and a k step of 32),
// one that adds into a given result and a bf16 right operand with a scale:
// within TF32's rounding of fp64.
TEST(BatchedGemmKernelTest, MultipliesAsFp64InEveryLayout) {
  SKIP_WITHOUT_CUDA_KERNELS();
  const std::int64_t m = 80, n = 72, k = 40;
  const torch::Tensor a64 = Random({2, 3, m, k}, 140), b64 = Random({2, 3, k, n}, 141),
                      c64 = Random({2, 3, m, n}, 142);
  const torch::Tensor want = torch::matmul(a64, b64);
  auto gpu = [](const torch::Tensor& x) { return x.to(torch::kCUDA, torch::kFloat); };
  // A transposed operand: stored [..., cols, rows], used as its transpose.
  auto stored_transposed = [&](const torch::Tensor& x) {
    return gpu(x.transpose(-1, -2).contiguous()).transpose(-1, -2);
  };
  for (int layout = 0; layout < 4; ++layout) {
    const torch::Tensor a = layout & 1 ? stored_transposed(a64) : gpu(a64);
    const torch::Tensor b = layout & 2 ? stored_transposed(b64) : gpu(b64);
    ASSERT_TRUE(BatchedMatmulTf32Applies(a, b)) << "layout " << layout;
    EXPECT_LT(RelativeError(BatchedMatmulTf32(a, b), want), 2e-3) << "layout " << layout;
    const torch::Tensor into = gpu(c64);
    const torch::Tensor sum = BatchedMatmulTf32(a, b, into);
    EXPECT_EQ(sum.data_ptr(), into.data_ptr()) << "layout " << layout;
    EXPECT_LT(RelativeError(sum, c64 + want), 2e-3) << "layout " << layout;
  }
  // A bf16 right operand (exact in TF32), row-major and transposed, scaled.
  const torch::Tensor b_bf16 = b64.to(torch::kBFloat16);
  const torch::Tensor want_scaled = -2.0 * torch::matmul(a64, b_bf16.to(torch::kDouble));
  for (const torch::Tensor& b : {b_bf16.to(torch::kCUDA),
                                 b_bf16.transpose(-1, -2).contiguous().to(torch::kCUDA).transpose(-1, -2)}) {
    ASSERT_TRUE(BatchedMatmulTf32Applies(gpu(a64), b));
    EXPECT_LT(RelativeError(BatchedMatmulTf32(gpu(a64), b, {}, -2.f), want_scaled), 2e-3);
  }
  // Size-1 leading dimensions with strides of their own (a narrowed view):
  // the batch stride is the outer dimension's, not theirs.
  const torch::Tensor base64 = Random({2, 1, 2, 32, 16}, 145), b1 = Random({2, 1, 1, 16, 8}, 146);
  const torch::Tensor narrowed = gpu(base64).narrow(2, 0, 1);
  ASSERT_TRUE(BatchedMatmulTf32Applies(narrowed, gpu(b1)));
  EXPECT_LT(RelativeError(BatchedMatmulTf32(narrowed, gpu(b1)), torch::matmul(base64.narrow(2, 0, 1), b1)), 2e-3);
  // Nothing to multiply is no product of this kernel's (and no division by zero).
  EXPECT_FALSE(BatchedMatmulTf32Applies(gpu(Random({2, 0, 8}, 147)), gpu(Random({2, 8, 8}, 148))));
  // M 24 is no multiple of 16: refused, by name.
  const torch::Tensor odd = gpu(Random({2, 24, k}, 143)), b = gpu(Random({2, k, n}, 144));
  EXPECT_FALSE(BatchedMatmulTf32Applies(odd, b));
  try {
    BatchedMatmulTf32(odd, b);
    ADD_FAILURE() << "an M of 24 was multiplied";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("BatchedMatmulTf32"), std::string::npos) << e.what();
  }
}

// ------------------------------------------------------------------ depth read

struct ReadRun {
  torch::Tensor out;
  std::vector<torch::Tensor> grads;  // the values', then the norm weight's and the query's
};

ReadRun RunRead(int n, std::int64_t dim, torch::Device device, torch::Dtype dtype, bool kernel) {
  std::vector<torch::Tensor> values;
  for (int i = 0; i < n; ++i)
    values.push_back((Random({3, 37, dim}, 30 + i) * (1 + i)).to(device, dtype).requires_grad_(true));
  const torch::Tensor norm_weight = (1 + 0.1 * Random({dim}, 70)).to(device, torch::kFloat).requires_grad_(true);
  const torch::Tensor query = Random({dim}, 71).to(device, torch::kFloat).requires_grad_(true);
  ReadRun r;
  if (kernel) {
    EXPECT_TRUE(AttnResKernelApplies(values));
    r.out = AttnResReadKernel(values, norm_weight, query, 1e-6);
  } else {
    const std::vector<torch::Tensor> blocks(values.begin(), values.end() - 1);
    r.out = AttnResRead(blocks, values.back(), norm_weight, query, 1e-6);
  }
  const torch::Tensor w = Random(r.out.sizes(), 72).to(r.out.options());
  std::vector<torch::Tensor> wrt = values;
  wrt.push_back(norm_weight);
  wrt.push_back(query);
  r.grads = torch::autograd::grad({(r.out * w).sum()}, wrt);
  return r;
}

// dim 64 takes the kernels' channel-at-a-time form; 256 their 16-byte packs
// (8 bf16 or 4 fp32 channels a lane).
TEST(AttnResKernelTest, MatchesTheTorchReadInFp64AndBf16) {
  SKIP_WITHOUT_CUDA_KERNELS();
  for (std::int64_t dim : {64, 256}) {
    for (int n : {1, 5, 16}) {
      const ReadRun want = RunRead(n, dim, torch::kCPU, torch::kDouble, false);
      const ReadRun got = RunRead(n, dim, torch::kCUDA, torch::kFloat, true);
      EXPECT_LT(RelativeError(got.out, want.out), 1e-5) << n << " values, dim " << dim;
      for (std::size_t i = 0; i < want.grads.size(); ++i)
        EXPECT_LT(RelativeError(got.grads[i], want.grads[i]), 1e-4) << n << " values, dim " << dim << ", grad " << i;
      // bf16 values as the bf16 model has them: the same fp32 arithmetic,
      // then rounded to bf16, as the torch form rounds.
      const ReadRun torch_bf16 = RunRead(n, dim, torch::kCUDA, torch::kBFloat16, false);
      const ReadRun kernel_bf16 = RunRead(n, dim, torch::kCUDA, torch::kBFloat16, true);
      EXPECT_EQ(kernel_bf16.out.scalar_type(), torch::kBFloat16);
      EXPECT_LT(RelativeError(kernel_bf16.out, torch_bf16.out), 1e-2) << n << " values, dim " << dim;
      for (std::size_t i = 0; i < want.grads.size(); ++i)
        EXPECT_LT(RelativeError(kernel_bf16.grads[i], torch_bf16.grads[i]), 2e-2)
            << n << " values, dim " << dim << ", bf16 grad " << i;
    }
  }
}

// ------------------------------------------------------------------ RMSNorm

TEST(RmsNormKernelTest, MatchesTheTorchNormInFp64AndBf16) {
  SKIP_WITHOUT_CUDA_KERNELS();
  for (std::int64_t dim : {64, 96}) {
    auto run = [&](torch::Device device, torch::Dtype dtype, bool fused) {
      RmsNormImpl norm(dim, 1e-6, fused);
      {
        torch::NoGradGuard no_grad;
        norm.weight().copy_(1 + 0.3 * Random({dim}, 80).to(torch::kFloat));
      }
      norm.to(device);  // the weight stays fp32, as the model keeps it
      const torch::Tensor x = (Random({4, 33, dim}, 81) * 3).to(device, dtype).requires_grad_(true);
      const torch::Tensor y = norm.forward(x);
      const torch::Tensor w = Random(y.sizes(), 82).to(y.options());
      ReadRun r;
      r.out = y;
      r.grads = torch::autograd::grad({(y * w).sum()}, {x, norm.weight()});
      return r;
    };
    ASSERT_TRUE(RmsNormKernelApplies(torch::zeros({2, dim}, torch::device(torch::kCUDA))));
    const ReadRun want = run(torch::kCPU, torch::kDouble, false), got = run(torch::kCUDA, torch::kFloat, true);
    EXPECT_LT(RelativeError(got.out, want.out), 1e-5) << dim;
    EXPECT_LT(RelativeError(got.grads[0], want.grads[0]), 1e-5) << dim;
    EXPECT_LT(RelativeError(got.grads[1], want.grads[1]), 1e-5) << dim;
    const ReadRun torch_bf16 = run(torch::kCUDA, torch::kBFloat16, false);
    const ReadRun kernel_bf16 = run(torch::kCUDA, torch::kBFloat16, true);
    EXPECT_EQ(kernel_bf16.out.scalar_type(), torch::kBFloat16);
    EXPECT_LT(RelativeError(kernel_bf16.out, torch_bf16.out), 1e-2) << dim;
    for (int i = 0; i < 2; ++i) EXPECT_LT(RelativeError(kernel_bf16.grads[i], torch_bf16.grads[i]), 2e-2) << dim;
  }
}

// ------------------------------------------------------------------ KDA layer

ModelSpec KdaLayerSpec() {
  ModelSpec m;
  m.hidden = 96;
  m.heads = 2;
  m.kda.head_dim_k = 128;
  m.kda.head_dim_v = 64;
  m.kda.conv_kernel = 4;
  return m;
}

struct LayerRun {
  torch::Tensor out;
  std::vector<torch::Tensor> grads;  // x, then the parameters in order
};

// The whole KDA layer, L = <out, R>: with `fused` on a GPU, the preparation
// kernels (convolutions, norms, gate), the intra-chunk and scan kernels and
// RMSNorm, the scan and its products in fp32 or on `tensor_cores`; without,
// every torch form.
LayerRun RunKdaLayer(torch::Device device, torch::Dtype dtype, bool fused, bool tensor_cores = false) {
  Init init(31);
  ModelOptions opts;
  opts.fused_kernels = fused;
  opts.kda_tensor_cores = tensor_cores;
  opts.kda_chunk = 32;
  KdaImpl kda(KdaLayerSpec(), opts, 0.1, 0.1, init);
  kda.to(device, dtype == torch::kBFloat16 ? torch::kFloat : dtype);  // bf16 runs keep fp32 parameters
  const torch::Tensor x = Random({2, 45, 96}, 5).to(device, dtype).requires_grad_(true);
  LayerRun r;
  r.out = kda.Mix(x);
  std::vector<torch::Tensor> wrt = {x};
  for (const auto& p : kda.parameters()) wrt.push_back(p);
  const torch::Tensor w = Random(r.out.sizes(), 6).to(device, torch::kFloat);
  r.grads = torch::autograd::grad({(r.out.to(torch::kFloat) * w).sum()}, wrt);
  return r;
}

TEST(KdaPrepKernelTest, TheLayerMatchesItsTorchFormsInFp64) {
  SKIP_WITHOUT_CUDA_KERNELS();
  const auto cuda = torch::device(torch::kCUDA);
  ASSERT_TRUE(KdaPrepKernelsApply(torch::zeros({1, 1, 256}, cuda), 128, 4));
  const LayerRun want = RunKdaLayer(torch::kCPU, torch::kDouble, false);
  const LayerRun got = RunKdaLayer(torch::kCUDA, torch::kFloat, true);
  EXPECT_LT(RelativeError(got.out, want.out), 1e-5);
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (std::size_t i = 0; i < want.grads.size(); ++i) EXPECT_LT(RelativeError(got.grads[i], want.grads[i]), 1e-4) << i;
  // With the scan and its products on tensor cores (the training default).
  const LayerRun tf32 = RunKdaLayer(torch::kCUDA, torch::kFloat, true, /*tensor_cores=*/true);
  EXPECT_LT(RelativeError(tf32.out, want.out), 5e-3);
  for (std::size_t i = 0; i < want.grads.size(); ++i) EXPECT_LT(RelativeError(tf32.grads[i], want.grads[i]), 1e-2) << i;
  // In bf16 (as training runs it) against the torch forms in bf16: the same
  // roundings of the projections, fp32 inside both.
  const LayerRun torch_bf16 = RunKdaLayer(torch::kCUDA, torch::kBFloat16, false);
  const LayerRun kernel_bf16 = RunKdaLayer(torch::kCUDA, torch::kBFloat16, true);
  EXPECT_LT(RelativeError(kernel_bf16.out, torch_bf16.out), 2e-2);
  for (std::size_t i = 0; i < want.grads.size(); ++i)
    EXPECT_LT(RelativeError(kernel_bf16.grads[i], torch_bf16.grads[i]), 5e-2) << i;
}

// The convolution at width 3 (the kernels for any width), width 4 (built
// for it) and width 4 at dim 128 (four channels a lane in one access).
TEST(KdaPrepKernelTest, ConvolutionAndGateMatchFp64WithPadding) {
  SKIP_WITHOUT_CUDA_KERNELS();
  // 50 tokens in chunks of 16: the last chunk has 2 real rows.
  const std::int64_t b = 2, t = 50, h = 3, d = 64, chunk = 16, padded = 64;
  const torch::Tensor x = Random({b, t, h * d}, 40);
  const torch::Tensor a_log = Random({h}, 42) * 0.5, dt = Random({h * d}, 43) - 3.0;
  auto chunked = [&](const torch::Tensor& y) {  // [B, T, H, dim] -> [B, H, n, C, dim], zero tail
    const torch::Tensor z = torch::cat({y.transpose(1, 2), torch::zeros({b, h, padded - t, y.size(3)}, y.options())}, 2);
    return z.reshape({b, h, padded / chunk, chunk, y.size(3)});
  };
  for (const auto& [dim, width] : {std::pair<std::int64_t, std::int64_t>{64, 3}, {64, 4}, {128, 4}}) {
    const torch::Tensor xs = Random({b, t, h * dim}, 40 + dim), w = Random({h * dim, width}, 41) * 0.5;
    for (bool l2 : {true, false}) {
      std::vector<torch::Tensor> grads[2];
      torch::Tensor outs[2];
      for (int i = 0; i < 2; ++i) {
        const auto device = i == 0 ? torch::kCPU : torch::kCUDA;
        const auto dtype = i == 0 ? torch::kDouble : torch::kFloat;
        const torch::Tensor xi = xs.to(device, dtype).requires_grad_(true),
                            wi = w.to(device, dtype).requires_grad_(true);
        if (i == 0) {
          torch::Tensor y = torch::silu(CausalDepthwiseConv(xi, wi)).view({b, t, h, dim});
          if (l2) y = y * torch::rsqrt(y.pow(2).sum(-1, true) + 1e-6) * 0.25;
          outs[i] = chunked(y);
        } else {
          outs[i] = KdaShortConvChunked(xi, wi, h, chunk, l2, l2 ? 0.25 : 1.0, 1e-6);
        }
        const torch::Tensor r = Random(outs[i].sizes(), 44).to(device, dtype);
        grads[i] = torch::autograd::grad({(outs[i] * r).sum()}, {xi, wi});
      }
      const std::string at = "dim " + std::to_string(dim) + ", width " + std::to_string(width) + ", l2 " +
                             std::to_string(l2);
      EXPECT_LT(RelativeError(outs[1], outs[0]), 1e-6) << at;
      EXPECT_LT(RelativeError(grads[1][0], grads[0][0]), 1e-5) << "dx, " << at;
      EXPECT_LT(RelativeError(grads[1][1], grads[0][1]), 1e-5) << "dw, " << at;
    }
  }
  std::vector<torch::Tensor> grads[2];
  torch::Tensor cums[2];
  for (int i = 0; i < 2; ++i) {
    const auto device = i == 0 ? torch::kCPU : torch::kCUDA;
    const auto dtype = i == 0 ? torch::kDouble : torch::kFloat;
    const torch::Tensor f = x.to(device, dtype).requires_grad_(true), ai = a_log.to(device, dtype).requires_grad_(true),
                        di = dt.to(device, dtype).requires_grad_(true);
    if (i == 0) {
      const torch::Tensor g = -torch::exp(ai).view({1, 1, h, 1}) * torch::softplus(f.view({b, t, h, d}) + di.view({h, d}));
      cums[i] = chunked(g).cumsum(3);
    } else {
      cums[i] = KdaGateCumChunked(f, ai, di, h, chunk);
    }
    const torch::Tensor r = Random(cums[i].sizes(), 45).to(device, dtype);
    grads[i] = torch::autograd::grad({(cums[i] * r).sum()}, {f, ai, di});
  }
  EXPECT_LT(RelativeError(cums[1], cums[0]), 1e-6);
  const char* names[] = {"df", "da_log", "ddt_bias"};
  for (int g = 0; g < 3; ++g) EXPECT_LT(RelativeError(grads[1][g], grads[0][g]), 1e-5) << names[g];
}

TEST(SwiGluKernelTest, MatchesTheTorchProductInFp64AndBf16) {
  SKIP_WITHOUT_CUDA_KERNELS();
  // 16-byte packs only, then a count that leaves a tail of single elements.
  for (const std::vector<std::int64_t>& shape : {std::vector<std::int64_t>{300, 96}, std::vector<std::int64_t>{37, 5}}) {
    const torch::Tensor gate = Random(shape, 50) * 3.0, up = Random(shape, 51), r = Random(shape, 52);
    auto run = [&](torch::Device device, torch::Dtype dtype, bool kernel) {
      const torch::Tensor g = gate.to(device, dtype).requires_grad_(true), u = up.to(device, dtype).requires_grad_(true);
      const torch::Tensor h = kernel ? SwiGluKernel(g, u) : torch::silu(g) * u;
      std::vector<torch::Tensor> out =
          torch::autograd::grad({(h.to(torch::kFloat) * r.to(device, torch::kFloat)).sum()}, {g, u});
      out.insert(out.begin(), h);
      return out;
    };
    const auto want = run(torch::kCPU, torch::kDouble, false);
    const auto got = run(torch::kCUDA, torch::kFloat, true);
    const auto bf16 = run(torch::kCUDA, torch::kBFloat16, true);
    EXPECT_EQ(bf16[0].scalar_type(), torch::kBFloat16);
    for (int i = 0; i < 3; ++i) {
      EXPECT_LT(RelativeError(got[i], want[i]), 1e-6) << i << ", " << shape[0] << " x " << shape[1];
      EXPECT_LT(RelativeError(bf16[i], want[i]), 1e-2) << i << ", " << shape[0] << " x " << shape[1];
    }
  }
}

TEST(CrossEntropyKernelTest, MatchesTorchInFp64AndBf16WithIgnoredTargets) {
  SKIP_WITHOUT_CUDA_KERNELS();
  const std::int64_t n = 37, v = 1000;
  const torch::Tensor logits = Random({n, v}, 60) * 4.0;
  torch::Tensor targets = torch::randint(v, {n}, torch::kLong);
  targets.index_put_({torch::tensor({3, 17})}, -100);
  auto run = [&](torch::Device device, torch::Dtype dtype, bool kernel) {
    const torch::Tensor x = logits.to(device, dtype).requires_grad_(true), t = targets.to(device);
    const torch::Tensor rows =
        kernel ? CrossEntropyKernel(x, t)
               : torch::nn::functional::cross_entropy(x, t, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    const torch::Tensor r = Random({n}, 61).to(device, rows.scalar_type());
    return std::vector<torch::Tensor>{rows, torch::autograd::grad({(rows * r).sum()}, {x})[0]};
  };
  const auto want = run(torch::kCPU, torch::kDouble, false);
  const auto got = run(torch::kCUDA, torch::kFloat, true);
  const auto bf16 = run(torch::kCUDA, torch::kBFloat16, true);
  EXPECT_EQ(got[0][3].item<double>(), 0.0);
  EXPECT_EQ(got[1][17].abs().max().item<double>(), 0.0);
  EXPECT_LT(RelativeError(got[0], want[0]), 1e-6);
  EXPECT_LT(RelativeError(got[1], want[1]), 1e-6);
  EXPECT_EQ(bf16[1].scalar_type(), torch::kBFloat16);
  // bf16 logits, against fp64 of the same bf16 values.
  const torch::Tensor rounded = logits.to(torch::kBFloat16).to(torch::kDouble);
  const torch::Tensor want_rows = torch::nn::functional::cross_entropy(
      rounded, targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  EXPECT_LT(RelativeError(bf16[0], want_rows), 1e-6);
  EXPECT_LT(RelativeError(bf16[1], want[1]), 2e-2);
  // The mean of LanguageModelLoss: over the targets that are not ignored.
  const torch::Tensor x3 = logits.to(torch::kCUDA).view({1, n, v}), t3 = targets.to(torch::kCUDA).view({1, n});
  EXPECT_NEAR(LanguageModelLoss(x3, t3, true).item<double>(), LanguageModelLoss(x3, t3, false).item<double>(), 1e-5);
}

TEST(GatedRmsNormKernelTest, MatchesTheTorchFormsInFp64FromAHeadMajorView) {
  SKIP_WITHOUT_CUDA_KERNELS();
  // x as KdaChunkedCore leaves it: [B, H, padded, D] cut to T tokens and
  // transposed to [B, T, H, D]; the gate [B, T, H D].
  const std::int64_t b = 2, h = 3, t = 37, padded = 48, d = 64;
  const torch::Tensor x0 = Random({b, h, padded, d}, 90) * 2, gate0 = Random({b, t, h * d}, 91) * 2;
  const torch::Tensor w0 = 1 + 0.3 * Random({d}, 92), r = Random({b, t, h * d}, 93);
  auto run = [&](torch::Device device, torch::Dtype gate_dtype, bool kernel) {
    const auto fp = kernel ? torch::kFloat : torch::kDouble;
    const torch::Tensor base = x0.to(device, fp).requires_grad_(true);
    const torch::Tensor gate = gate0.to(device, gate_dtype).requires_grad_(true);
    const torch::Tensor w = w0.to(device, fp).requires_grad_(true);
    const torch::Tensor x = base.narrow(2, 0, t).transpose(1, 2);
    const torch::Tensor y =
        kernel ? GatedRmsNormKernel(x, gate, w, 1e-6)
               : (RmsNormalize(x, 1e-6) * w * torch::sigmoid(gate.to(fp).view({b, t, h, d}))).reshape({b, t, h * d});
    const auto g = torch::autograd::grad({(y.to(torch::kDouble) * r.to(device)).sum()}, {base, gate, w});
    return std::vector<torch::Tensor>{y, g[0], g[1], g[2]};
  };
  const auto want = run(torch::kCPU, torch::kDouble, false);
  const auto got = run(torch::kCUDA, torch::kFloat, true);
  for (int i = 0; i < 4; ++i) EXPECT_LT(RelativeError(got[i], want[i]), 1e-5) << i;
  EXPECT_EQ(got[1].narrow(2, t, padded - t).abs().max().item<double>(), 0.0);  // no gradient into the padding
  const auto bf16 = run(torch::kCUDA, torch::kBFloat16, true);
  EXPECT_EQ(bf16[0].scalar_type(), torch::kBFloat16);
  for (int i = 0; i < 4; ++i) EXPECT_LT(RelativeError(bf16[i], want[i]), 2e-2) << i;
}

TEST(LinearCrossEntropyKernelTest, MatchesTheLinearThenCrossEntropyInFp64ChunkByChunk) {
  SKIP_WITHOUT_CUDA_KERNELS();
  // 37 rows in chunks of 16 (the last one partial), two ignored targets.
  const std::int64_t n = 37, d = 64, v = 500;
  const torch::Tensor x0 = Random({n, d}, 62), w0 = Random({v, d}, 63) * 0.3;
  torch::Tensor targets = torch::randint(v, {n}, torch::kLong);
  targets.index_put_({torch::tensor({3, 17})}, -100);
  auto run = [&](torch::Device device, torch::Dtype dtype, bool kernel) {
    const torch::Tensor x = x0.to(device, dtype).requires_grad_(true);
    const torch::Tensor w = w0.to(device, kernel ? torch::kFloat : dtype).requires_grad_(true);
    const torch::Tensor t = targets.to(device);
    const torch::Tensor loss = kernel ? LinearCrossEntropyKernel(x, w, t, 16) / (t != -100).sum()
                                      : torch::nn::functional::cross_entropy(torch::linear(x, w), t);
    const auto g = torch::autograd::grad({loss * 3.0}, {x, w});
    return std::vector<torch::Tensor>{loss, g[0], g[1]};
  };
  const auto want = run(torch::kCPU, torch::kDouble, false);
  const auto got = run(torch::kCUDA, torch::kFloat, true);
  for (int i = 0; i < 3; ++i) EXPECT_LT(RelativeError(got[i], want[i]), 1e-5) << i;
  EXPECT_EQ(got[1][17].abs().max().item<double>(), 0.0);
  const auto bf16 = run(torch::kCUDA, torch::kBFloat16, true);
  EXPECT_EQ(bf16[1].scalar_type(), torch::kBFloat16);
  EXPECT_EQ(bf16[2].scalar_type(), torch::kFloat);
  EXPECT_LT(RelativeError(bf16[0], want[0]), 1e-2);
  for (int i = 1; i < 3; ++i) EXPECT_LT(RelativeError(bf16[i], want[i]), 3e-2) << i;
}

TEST(CastKernelTest, EqualsTorchsCastBitForBitBothWays) {
  SKIP_WITHOUT_CUDA_KERNELS();
  // Aligned packs, a tail, and a view 4 bytes off alignment; values across
  // bf16's range, ties included (1 + 2^-8 rounds to even).
  torch::Tensor base = (Random({1003}, 70) * 1e3).to(torch::kCUDA, torch::kFloat);
  base.index_put_({0}, 1.0 + 1.0 / 256);
  for (const torch::Tensor& w : {base, base.narrow(0, 1, 1000)}) {
    const torch::Tensor a = w.detach().requires_grad_(true), b = w.detach().requires_grad_(true);
    const torch::Tensor ya = CastKernel(a, torch::kBFloat16), yb = b.to(torch::kBFloat16);
    EXPECT_TRUE(torch::equal(ya, yb));
    const torch::Tensor g = Random(ya.sizes(), 71).to(torch::kCUDA, torch::kBFloat16);
    EXPECT_TRUE(torch::equal(torch::autograd::grad({ya}, {a}, {g})[0], torch::autograd::grad({yb}, {b}, {g})[0]));
  }
}

// The kernel against int4_linear.h's LibTorch form on the CPU, bit for bit:
// words with the top nibble set (negative int32), groups of zeros, and a
// 3-D bank; and bad inputs are errors naming them.
TEST(Int4DequantKernelTest, EqualsTheTorchFormBitForBit) {
  SKIP_WITHOUT_CUDA_KERNELS();
  torch::Tensor w = Random({3, 6, 96}, 90) * 0.3;
  w[0][0].narrow(0, 0, 32).zero_();
  w[1][2].narrow(0, 32, 32).fill_(-1.0);  // the largest is -1: q = -8, nibble 0 ...
  w[1][2][40] = 0.9375;                     // ... and 7.03 -> 7, nibble 15
  const Int4Weight q = QuantizeInt4Weight(w);
  ASSERT_TRUE((q.packed < 0).any().item<bool>());
  for (const auto dtype : {torch::kBFloat16, torch::kFloat}) {
    const torch::Tensor got = Int4DequantKernel(q.packed.cuda(), q.scales.cuda(), dtype);
    EXPECT_EQ(got.scalar_type(), dtype);
    EXPECT_TRUE(torch::equal(got.cpu(), DequantizeInt4Weight(q, dtype))) << c10::toString(dtype);
  }
  const torch::Tensor bad_scales = q.scales.cuda().narrow(-1, 0, 2);
  try {
    Int4DequantKernel(q.packed.cuda(), bad_scales, torch::kBFloat16);
    ADD_FAILURE() << "a scale of the wrong shape was taken";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("Int4DequantKernel: scales: sizes [3, 6, 2]"),
              std::string::npos)
        << e.what_without_backtrace();
  }
}

TEST(MoeCombineKernelTest, MatchesTheScatterAndWeightedSumInFp64) {
  SKIP_WITHOUT_CUDA_KERNELS();
  const std::int64_t n = 37, k = 3, d = 64;
  const torch::Tensor rows = Random({n * k, d}, 80), weights = Random({n, k}, 81).abs();
  const torch::Tensor order = torch::randperm(n * k, torch::kLong);  // sorted position i holds slot order[i]
  const torch::Tensor r = Random({n, d}, 82);
  auto run = [&](torch::Device device, torch::Dtype dtype, bool kernel) {
    const torch::Tensor x = rows.to(device, dtype).requires_grad_(true);
    const torch::Tensor w = weights.to(device, kernel ? torch::kFloat : dtype).requires_grad_(true);
    const torch::Tensor o = order.to(device);
    torch::Tensor y;
    if (kernel) {
      y = MoeCombineKernel(x, torch::empty_like(o).scatter_(0, o, torch::arange(n * k, o.options())), w);
    } else {
      const torch::Tensor slots = torch::zeros_like(x).index_copy(0, o, x);
      y = (slots.view({n, k, d}) * w.unsqueeze(-1)).sum(1);
    }
    const auto g = torch::autograd::grad({(y.to(torch::kFloat) * r.to(device, torch::kFloat)).sum()}, {x, w});
    return std::vector<torch::Tensor>{y, g[0], g[1]};
  };
  const auto want = run(torch::kCPU, torch::kDouble, false);
  const auto got = run(torch::kCUDA, torch::kFloat, true);
  for (int i = 0; i < 3; ++i) EXPECT_LT(RelativeError(got[i], want[i]), 1e-6) << i;
}

// ------------------------------------------------------------------ experts

TEST(ExpertCountsTest, EqualsBincount) {
  const torch::Tensor ids = torch::randint(0, 7, {50, 3}, torch::kLong);
  EXPECT_TRUE(torch::equal(ExpertCounts(ids, 9), torch::bincount(ids.reshape(-1), {}, 9)));
}

ModelSpec WideMoeSpec() {
  ModelSpec m;
  m.hidden = 64;
  m.moe.num_experts = 8;
  m.moe.top_k = 2;
  m.moe.expert_ffn = 96;
  m.moe.shared_experts = 1;
  m.moe.shared_ffn = 32;
  m.moe.latent_dim = 48;
  return m;
}

struct MoeRun {
  torch::Tensor out;
  std::vector<torch::Tensor> grads;
};

// The MoE with experts 0 and 5 never chosen (a router bias of -1e4) and an
// uneven load on the rest, bf16 on the GPU, grouped or looped; with `fp8`,
// the experts' products in FP8 at widths in whole 128s (latent 128, FFN 256).
MoeRun RunMoe(bool fused, bool fp8 = false) {
  Init init(21);
  ModelOptions opts;
  opts.fused_kernels = fused;
  opts.fp8_experts = fp8;
  ModelSpec spec = WideMoeSpec();
  if (fp8) {
    spec.moe.latent_dim = 128;
    spec.moe.expert_ffn = 256;
  }
  MoeImpl moe(spec, opts, 0.2, 0.2, init);
  {
    torch::NoGradGuard no_grad;
    torch::Tensor bias = moe.router().named_buffers()["bias"];
    bias.copy_(torch::tensor({-1e4, 0.3, 0.0, 0.1, -0.2, -1e4, 0.5, 0.0}));
  }
  moe.to(torch::kCUDA);  // fp32 parameters, bf16 activations: as the model runs
  const torch::Tensor x = Random({3, 41, 64}, 8).to(torch::kCUDA, torch::kBFloat16).requires_grad_(true);
  MoeRun r;
  r.out = moe.Mix(x, false);
  std::vector<torch::Tensor> wrt = {x};
  for (const auto& p : moe.parameters()) wrt.push_back(p);
  const torch::Tensor w = Random(r.out.sizes(), 9).to(r.out.options());
  r.grads = torch::autograd::grad({(r.out.to(torch::kFloat) * w.to(torch::kFloat)).sum()}, wrt);
  return r;
}

// The grouped run's output and every gradient within the tolerances of the
// loop's; a gradient the loop gives as exactly zero (an expert never
// chosen) exactly zero too.
void ExpectMoeRunsClose(const MoeRun& grouped, const MoeRun& looped, double out_tolerance, double grad_tolerance) {
  EXPECT_LT(RelativeError(grouped.out, looped.out), out_tolerance);
  ASSERT_EQ(grouped.grads.size(), looped.grads.size());
  for (std::size_t i = 0; i < looped.grads.size(); ++i) {
    if (looped.grads[i].abs().max().item<double>() == 0) {
      EXPECT_EQ(grouped.grads[i].abs().max().item<double>(), 0) << "grad " << i;
      continue;
    }
    EXPECT_LT(RelativeError(grouped.grads[i], looped.grads[i]), grad_tolerance) << "grad " << i;
  }
}

TEST(GroupedExpertsTest, EqualThePerExpertLoopWithEmptyAndUnevenExperts) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  {
    Init init(1);
    ExpertBankImpl probe(2, 8, 8, 0.1, 0.1, init);
    if (!probe.GroupedApplies(torch::zeros({1, 8}, torch::dtype(torch::kBFloat16).device(torch::kCUDA))))
      GTEST_SKIP() << "this LibTorch has no grouped GEMM (PyTorch 2.8+)";
  }
  // Both are bf16 GEMMs with fp32 accumulation over the same rows: they
  // differ by the order inside each dot product and the final bf16 rounding.
  ExpectMoeRunsClose(RunMoe(true), RunMoe(false), 1e-2, 2e-2);
}

// FP8 experts grouped (this project's grouped kernels, one launch per
// product) against the loop over experts (cuBLASLt's blockwise-scaled GEMM
// per expert): the same recipe on the same operands. They differ by the
// order of the sums and by bf16 roundings of the SwiGLU product (the fused
// kernel against LibTorch's ops), which can move a value across an e4m3
// rounding boundary: hence bf16-sized tolerances.
TEST(GroupedExpertsTest, InFp8EqualThePerExpertLoop) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  {
    Init init(1);
    ExpertBankImpl probe(2, 128, 128, 0.1, 0.1, init);
    probe.set_fp8(true);
    if (!probe.GroupedApplies(torch::zeros({1, 128}, torch::dtype(torch::kBFloat16).device(torch::kCUDA))))
      GTEST_SKIP() << "needs the FP8 kernels (PyTorch 2.11+, sm_90)";
  }
  ExpectMoeRunsClose(RunMoe(true, true), RunMoe(false, true), 2e-2, 3e-2);
}

// ------------------------------------------------------------------ bad inputs

// The error's message, or "" when `fn` ran.
template <typename Fn>
std::string ErrorOf(Fn fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

// Every input is checked before a launch: a tensor of another shape, dtype
// or device is an error naming the kernel and the input, never a launch.
TEST(KernelInputsGpuTest, ABadInputIsAnErrorNamingItNotALaunch) {
  SKIP_WITHOUT_CUDA_KERNELS();
  torch::NoGradGuard no_grad;
  const KdaInputs gpu = To(RandomKda(2, 5, 2, 128, 64, 1.0, 7), torch::kCUDA, torch::kFloat);
  auto recurrent = [&](const torch::Tensor& k, const torch::Tensor& g, const torch::Tensor& beta) {
    return ErrorOf([&] { KdaRecurrentKernel(gpu.q, k, gpu.v, g, beta, gpu.s0, nullptr); });
  };
  EXPECT_EQ(recurrent(gpu.k, gpu.g, gpu.beta), "");
  EXPECT_EQ(recurrent(gpu.k.narrow(1, 0, 4), gpu.g, gpu.beta),
            "KdaRecurrentKernel: k: sizes [2, 4, 2, 128], where [2, 5, 2, 128] is read");
  EXPECT_EQ(recurrent(gpu.k, gpu.g.to(torch::kBFloat16), gpu.beta), "KdaRecurrentKernel: g: BFloat16, where Float is read");
  EXPECT_EQ(recurrent(gpu.k, gpu.g, gpu.beta.cpu()), "KdaRecurrentKernel: beta: on cpu, where the kernel runs on cuda:0");
  const torch::Tensor x = torch::randn({4, 64}, torch::kCUDA);
  EXPECT_EQ(ErrorOf([&] { RmsNormKernel(x, torch::ones({32}, torch::kCUDA), 1e-6); }),
            "RmsNormKernel: weight: sizes [32], where [64] is read");
  const torch::Tensor rows = torch::randn({6, 64}, torch::kCUDA), weights = torch::rand({2, 3}, torch::kCUDA);
  EXPECT_EQ(ErrorOf([&] { MoeCombineKernel(rows, torch::arange(6, torch::kCUDA).to(torch::kInt), weights); }),
            "MoeCombineKernel: row_of: Int, where Long is read");
  EXPECT_EQ(ErrorOf([&] { SwiGluKernel(x, torch::randn({4, 32}, torch::kCUDA)); }),
            "SwiGluKernel: up: sizes [4, 32], where [4, 64] is read");
}

// The FP8 quantisation against fp8_linear.h's LibTorch form, bit for bit
// once dequantised (tiles and blocks, bf16 and fp32, magnitudes over six
// decades, an all-zero block); the products against fp64 over the same
// operands, for each pairing of tiles and blocks cuBLASLt takes.
TEST(Fp8GemmKernelTest, QuantisesAsTheTorchFormAndMultipliesAsFp64) {
  SKIP_WITHOUT_CUDA_KERNELS();
  torch::Tensor x = (Random({256, 384}, 95) * torch::logspace(-3, 3, 384, 10, torch::kDouble)).to(torch::kFloat);
  x.narrow(0, 128, 128).narrow(1, 0, 128).zero_();
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const torch::Tensor in = x.to(dtype);
    for (const bool blocks : {false, true}) {
      const Fp8Operand q = QuantizeFp8(in.cuda(), blocks);
      EXPECT_EQ(q.scales.sizes(), (std::vector<std::int64_t>{blocks ? 2 : 256, 3}));
      // The layouts cuBLASLt reads: tiles' scales column-major, blocks' row-major.
      EXPECT_EQ(q.scales.strides(), (std::vector<std::int64_t>{blocks ? 3 : 1, blocks ? 1 : 256}));
      EXPECT_TRUE(torch::equal(DequantizeFp8(q).cpu(), FakeQuantizeFp8Blocks(in, blocks ? 128 : 1, 128)))
          << c10::toString(dtype) << (blocks ? " blocks" : " tiles");
      // Transposed by the kernel: x^T's tiles are x's 128 x 1 tiles (or its
      // blocks), transposed.
      const Fp8Operand t = QuantizeFp8(in.cuda(), blocks, /*transpose=*/true);
      EXPECT_EQ(t.values.sizes(), (std::vector<std::int64_t>{384, 256}));
      EXPECT_TRUE(torch::equal(DequantizeFp8(t).cpu(), FakeQuantizeFp8Blocks(in, 128, blocks ? 128 : 1).t()))
          << c10::toString(dtype) << (blocks ? " blocks" : " tiles") << ", transposed";
    }
  }
  const torch::Tensor a = Random({256, 512}, 96).to(torch::kCUDA, torch::kFloat);
  const torch::Tensor b = Random({384, 512}, 97).to(torch::kCUDA, torch::kFloat);
  for (auto [a_blocks, b_blocks] : {std::pair{false, true}, {false, false}, {true, false}}) {
    const Fp8Operand qa = QuantizeFp8(a, a_blocks), qb = QuantizeFp8(b, b_blocks);
    // The operands from the LibTorch form on the CPU, not from the kernels.
    auto operand = [](const torch::Tensor& t, bool blocks) {
      return FakeQuantizeFp8Blocks(t.cpu(), blocks ? 128 : 1, 128).to(torch::kDouble);
    };
    const torch::Tensor want = operand(a, a_blocks).mm(operand(b, b_blocks).t());
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      const torch::Tensor got = Fp8Matmul(qa, qb, dtype);
      EXPECT_EQ(got.scalar_type(), dtype);
      // Reduced-precision sums inside each 128-wide slice (about 14 bits on
      // Hopper), and bf16's rounding of the result where asked.
      EXPECT_LT(RelativeError(got, want), dtype == torch::kFloat ? 1e-3 : 5e-3)
          << a_blocks << b_blocks << c10::toString(dtype);
    }
  }
  // A block operand's k of 384 would have cuBLASLt read its scales
  // misaligned: refused, not run.
  const torch::Tensor b384 = b.narrow(1, 0, 384);
  EXPECT_EQ(ErrorOf([&] {
              Fp8Matmul(QuantizeFp8(a.narrow(1, 0, 384), false), QuantizeFp8(b384, true), torch::kFloat);
            }),
            "Fp8Matmul: k 384 with an operand in blocks, where a multiple of 512 is read (each row of block scales "
            "16-byte aligned)");
  EXPECT_EQ(ErrorOf([&] { QuantizeFp8(a.narrow(1, 0, 100), false); }),
            "QuantizeFp8 (1 x 128 tiles): x: sizes [256, 100], where [rows, cols] with cols a multiple of 128 is read");
  EXPECT_EQ(ErrorOf([&] { QuantizeFp8(a.to(torch::kDouble), true); }),
            "QuantizeFp8 (128 x 128 blocks): x: Double on cuda:0, where bf16 or fp32 on a Hopper (sm_90) GPU is read");
}

// Groups as the MoE layer sorts its rows: an empty expert, one shorter than
// a tile, one of exactly a tile, one a tile and two rows, one partial.
struct Fp8Groups {
  std::vector<std::int64_t> sizes = {0, 5, 128, 130, 37};
  std::int64_t rows() const { return std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0}); }
  torch::Tensor ends() const {
    std::vector<std::int32_t> e;
    std::int64_t at = 0;
    for (const std::int64_t n : sizes) e.push_back(static_cast<std::int32_t>(at += n));
    return torch::tensor(e, torch::kInt).cuda();
  }
  std::int64_t first_row(std::size_t g) const {
    return std::accumulate(sizes.begin(), sizes.begin() + static_cast<std::ptrdiff_t>(g), std::int64_t{0});
  }
  // Group g's first padded tile: each group's rows start a tile of their own.
  std::int64_t first_tile(std::size_t g) const {
    std::int64_t t = 0;
    for (std::size_t e = 0; e < g; ++e) t += (sizes[e] + 127) / 128;
    return t;
  }
};

// A grouped transposed operand, dequantised on the CPU: [cols, 128 P].
torch::Tensor DequantizedGroupedTiles(const Fp8Operand& o) {
  return o.values.cpu().to(torch::kFloat) * o.scales.cpu().repeat_interleave(128, 1);
}

// Each group's 128 x 1 tiles quantised from its own first row, as the
// per-expert form (FakeQuantizeFp8Blocks over the group's rows) makes them,
// bit for bit; the rows padding a group's last tile are zeros. Every
// expert's blocks in one launch equal QuantizeFp8 of each expert alone.
TEST(Fp8GroupedGemmKernelTest, QuantisesEachGroupsTilesAsThePerExpertForm) {
  SKIP_WITHOUT_CUDA_KERNELS();
  const Fp8Groups groups;
  const torch::Tensor x = (Random({groups.rows(), 256}, 41) * torch::logspace(-3, 3, 256, 10, torch::kDouble));
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const torch::Tensor in = x.to(dtype);
    const Fp8Operand q = QuantizeFp8GroupedTransposed(in.cuda(), groups.ends());
    // P = ceil(300 / 128) + 5 groups, a bound on the 5 tiles used.
    EXPECT_EQ(q.values.sizes(), (std::vector<std::int64_t>{256, 8 * 128}));
    EXPECT_EQ(q.scales.sizes(), (std::vector<std::int64_t>{256, 8}));
    const torch::Tensor got = DequantizedGroupedTiles(q);
    for (std::size_t g = 0; g < groups.sizes.size(); ++g) {
      const std::int64_t n = groups.sizes[g];
      if (n == 0) continue;
      const std::int64_t at = groups.first_tile(g) * 128, padded = (n + 127) / 128 * 128;
      const torch::Tensor want = FakeQuantizeFp8Blocks(in.narrow(0, groups.first_row(g), n), 128, 1).t();
      EXPECT_TRUE(torch::equal(got.narrow(1, at, n), want)) << c10::toString(dtype) << " group " << g;
      if (padded > n) {
        EXPECT_EQ(got.narrow(1, at + n, padded - n).abs().max().item<double>(), 0) << "group " << g << "'s padding";
      }
    }
  }
  const torch::Tensor w = Random({3, 256, 384}, 42).to(torch::kCUDA, torch::kBFloat16);
  for (const bool transpose : {false, true}) {
    const Fp8Operand all = QuantizeFp8Experts(w, transpose);
    for (std::int64_t e = 0; e < 3; ++e) {
      const Fp8Operand one = QuantizeFp8(w[e], /*blocks=*/true, transpose);
      EXPECT_TRUE(torch::equal(all.values[e].view(torch::kByte), one.values.view(torch::kByte)))
          << "expert " << e << (transpose ? ", transposed" : "");
      EXPECT_TRUE(torch::equal(all.scales[e], one.scales)) << "expert " << e << (transpose ? ", transposed" : "");
    }
  }
}

// Every group's product in one launch against fp64 over the same operands
// (dequantised on the CPU), for the forward's form (rows in groups, the
// weights' blocks per group) and the weight gradient's (each group's rows
// reduced, an empty group's product zero), in fp32 and bf16.
TEST(Fp8GroupedGemmKernelTest, MultipliesEachGroupAsFp64) {
  SKIP_WITHOUT_CUDA_KERNELS();
  const Fp8Groups groups;
  const torch::Tensor ends = groups.ends();
  const std::int64_t m = groups.rows(), experts = static_cast<std::int64_t>(groups.sizes.size());
  const torch::Tensor a = Random({m, 256}, 43).to(torch::kCUDA, torch::kFloat);
  const torch::Tensor b = Random({experts, 384, 256}, 44).to(torch::kCUDA, torch::kFloat);
  const torch::Tensor c = Random({m, 384}, 45).to(torch::kCUDA, torch::kFloat);
  const Fp8Operand qa = QuantizeFp8(a, false), qb = QuantizeFp8Experts(b, false);
  const Fp8Operand ga = QuantizeFp8GroupedTransposed(a, ends), gc = QuantizeFp8GroupedTransposed(c, ends);
  const torch::Tensor a_rows = FakeQuantizeFp8Blocks(a.cpu(), 1, 128).to(torch::kDouble);
  torch::Tensor want_rows = torch::zeros({m, 384}, torch::kDouble);
  torch::Tensor want_grad = torch::zeros({experts, 256, 384}, torch::kDouble);
  for (std::size_t g = 0; g < groups.sizes.size(); ++g) {
    const std::int64_t n = groups.sizes[g], first = groups.first_row(g);
    if (n == 0) continue;
    const torch::Tensor w = FakeQuantizeFp8Blocks(b[g].cpu(), 128, 128).to(torch::kDouble);
    want_rows.narrow(0, first, n).copy_(a_rows.narrow(0, first, n).mm(w.t()));
    const torch::Tensor ag = FakeQuantizeFp8Blocks(a.cpu().narrow(0, first, n), 128, 1).to(torch::kDouble);
    const torch::Tensor cg = FakeQuantizeFp8Blocks(c.cpu().narrow(0, first, n), 128, 1).to(torch::kDouble);
    want_grad[g].copy_(ag.t().mm(cg));
  }
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    // Reduced-precision sums inside each 128-wide slice (about 14 bits on
    // Hopper), and bf16's rounding of the result where asked.
    const double tolerance = dtype == torch::kFloat ? 1e-3 : 5e-3;
    const torch::Tensor rows = Fp8GroupedMatmul(qa, qb, ends, dtype);
    EXPECT_EQ(rows.scalar_type(), dtype);
    EXPECT_LT(RelativeError(rows, want_rows), tolerance) << c10::toString(dtype);
    const torch::Tensor grad = Fp8GroupedWeightGrad(ga, gc, ends, dtype);
    EXPECT_EQ(grad.sizes(), (std::vector<std::int64_t>{experts, 256, 384}));
    EXPECT_EQ(grad[0].abs().max().item<double>(), 0) << "the empty group";
    for (std::int64_t g = 1; g < experts; ++g)
      EXPECT_LT(RelativeError(grad[g], want_grad[g]), tolerance) << c10::toString(dtype) << " group " << g;
  }
  // Bad inputs are named, not launched.
  EXPECT_EQ(ErrorOf([&] { Fp8GroupedMatmul(qa, qb, ends.to(torch::kLong), torch::kFloat); }),
            "Fp8GroupedMatmul: ends: Long, where Int is read");
  EXPECT_EQ(ErrorOf([&] { Fp8GroupedMatmul(qa, qb, ends.narrow(0, 0, 4), torch::kFloat); }),
            "Fp8GroupedMatmul: b: sizes [5, 384, 256], where [4, ?, 256] is read");
  EXPECT_EQ(ErrorOf([&] { QuantizeFp8Experts(b.narrow(2, 0, 100), false); }),
            "QuantizeFp8Experts: w: sizes [5, 384, 100], where [experts, n, k] with n and k multiples of 128 is read");
}

}  // namespace
}  // namespace kp::runtime
