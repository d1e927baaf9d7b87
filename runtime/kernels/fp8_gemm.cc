// The FP8 products: the entry over fp8_gemm_cuda.h's quantisation and
// cuBLASLt's blockwise-scaled GEMM, or, in a build without them, entries
// that say no.
#include "runtime/kernels/fp8_gemm.h"

#include <string>

#ifdef KIMI_PLAN_CUDA_KERNELS
#include "runtime/kernels/fp8_gemm_cuda.h"
#include "runtime/kernels/kernel_support.h"
#else
#include "runtime/kernels/no_kernels.h"
#endif

namespace kp::runtime {

#ifdef KIMI_PLAN_CUDA_KERNELS

using namespace kernel_support;

namespace {

constexpr std::int64_t kTile = cuda::kFp8Tile;
constexpr c10::ScalarType kE4m3 = c10::ScalarType::Float8_e4m3fn;
// cuBLASLt reads a row of 128 x 128 block scales (k / 128 floats) 16-byte
// aligned: k a multiple of 4 x 128 (a k of 384 reads garbage, measured).
constexpr std::int64_t kBlockScaleK = 4 * kTile;

// The tile's scale for every value of `values`: scales spread over their
// tiles' extent.
torch::Tensor ScalesPerValue(const Fp8Operand& o) {
  const std::int64_t rows = o.values.size(0), k = o.values.size(1);
  torch::Tensor s = o.scales.contiguous();
  if (o.blocks) s = s.repeat_interleave(kTile, 0);
  return s.repeat_interleave(kTile, 1).narrow(0, 0, rows).narrow(1, 0, k);
}

}  // namespace

bool Fp8GemmApplies(const torch::Tensor& x) { return FloatOrBf16OnCuda(x); }

Fp8Operand QuantizeFp8(const torch::Tensor& x, bool blocks, bool transpose) {
  const std::string name = std::string("QuantizeFp8 (") + (blocks ? "128 x 128 blocks" : "1 x 128 tiles") +
                           (transpose ? ", transposed)" : ")");
  TORCH_CHECK(Fp8GemmApplies(x), name, ": x: ", c10::toString(x.scalar_type()), " on ", x.device(),
              ", where bf16 or fp32 on a Hopper or newer GPU is read");
  const bool rows_whole = blocks || transpose;
  TORCH_CHECK(x.dim() == 2 && x.size(1) % kTile == 0 && (!rows_whole || x.size(0) % kTile == 0), name,
              ": x: sizes ", x.sizes(), ", where [rows, cols] with cols", rows_whole ? " and rows" : "",
              " a multiple of 128 is read");
  CheckKernelInputs(name, {{"x", &x, {kAnySize, kAnySize}, kFloats}});
  const c10::cuda::CUDAGuard guard(x.device());
  const torch::Tensor in = x.contiguous();
  const std::int64_t rows = in.size(0), cols = in.size(1);
  const std::int64_t out_rows = transpose ? cols : rows, k = transpose ? rows : cols;
  Fp8Operand o;
  o.blocks = blocks;
  o.values = torch::empty({out_rows, k}, in.options().dtype(kE4m3));
  auto* q = static_cast<std::uint8_t*>(o.values.data_ptr());
  const bool bf16 = in.scalar_type() == torch::kBFloat16;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (blocks) {
    o.scales = torch::empty({out_rows / kTile, k / kTile}, in.options().dtype(torch::kFloat));
    Check(cuda::QuantizeFp8BlockTiles(rows, cols, in.data_ptr(), bf16, transpose, q, Out(o.scales), stream),
          "FP8 quantisation (blocks)");
    return o;
  }
  // 1 x 128 scales column-major: allocated as their transpose.
  torch::Tensor scales_t = torch::empty({k / kTile, out_rows}, in.options().dtype(torch::kFloat));
  Check(transpose ? cuda::QuantizeFp8ColumnTilesTransposed(rows, cols, in.data_ptr(), bf16, q, Out(scales_t), stream)
                  : cuda::QuantizeFp8RowTiles(rows, cols, in.data_ptr(), bf16, q, Out(scales_t), stream),
        "FP8 quantisation (tiles)");
  o.scales = scales_t.t();
  return o;
}

torch::Tensor Fp8Matmul(const Fp8Operand& a, const Fp8Operand& b, c10::ScalarType out_dtype) {
  TORCH_CHECK(!(a.blocks && b.blocks), "Fp8Matmul: a and b both in 128 x 128 blocks, where one at most is read");
  TORCH_CHECK(out_dtype == torch::kBFloat16 || out_dtype == torch::kFloat, "Fp8Matmul: out_dtype ",
              c10::toString(out_dtype), ", where bf16 or fp32 is written");
  const std::int64_t k = a.values.size(-1);
  CheckKernelInputs("Fp8Matmul", {{"a", &a.values, {kAnySize, k}, {kE4m3}},
                                  {"b", &b.values, {kAnySize, k}, {kE4m3}}});
  TORCH_CHECK(k % kTile == 0 && b.values.size(0) % kTile == 0, "Fp8Matmul: b: sizes ", b.values.sizes(),
              ", where k and n multiples of 128 are read");
  TORCH_CHECK(!(a.blocks || b.blocks) || k % kBlockScaleK == 0, "Fp8Matmul: k ", k,
              " with an operand in blocks, where a multiple of 512 is read (each row of block scales 16-byte aligned)");
  const c10::cuda::CUDAGuard guard(a.values.device());
  // cuBLASLt's FP8 GEMM is "TN": b enters as the column-major [k, n], its
  // scales transposed alike.
  return at::_scaled_mm(a.values, b.values.t(), a.scales, b.scales.t(), /*bias=*/std::nullopt,
                        /*scale_result=*/std::nullopt, out_dtype, /*use_fast_accum=*/false);
}

torch::Tensor DequantizeFp8(const Fp8Operand& o) { return o.values.to(torch::kFloat) * ScalesPerValue(o); }

#else  // no CUDA kernels in this build

bool Fp8GemmApplies(const torch::Tensor&) { return false; }
Fp8Operand QuantizeFp8(const torch::Tensor&, bool, bool) { kernel_support::NoCudaKernels("QuantizeFp8"); }
torch::Tensor Fp8Matmul(const Fp8Operand&, const Fp8Operand&, c10::ScalarType) {
  kernel_support::NoCudaKernels("Fp8Matmul");
}
torch::Tensor DequantizeFp8(const Fp8Operand&) { kernel_support::NoCudaKernels("DequantizeFp8"); }

#endif

}  // namespace kp::runtime
