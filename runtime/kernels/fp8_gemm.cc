// The FP8 products: the entry over fp8_gemm_cuda.h's quantisation and
// cuBLASLt's blockwise-scaled GEMM, or, in a build without them, entries
// that say no.
#include "runtime/kernels/fp8_gemm.h"

#include <string>

#if KIMI_PLAN_FP8_KERNELS
#include "runtime/kernels/fp8_gemm_cuda.h"
#include "runtime/kernels/kernel_support.h"
#else
#include "runtime/kernels/no_kernels.h"
#endif

namespace kp::runtime {

#if KIMI_PLAN_FP8_KERNELS

using namespace kernel_support;

namespace {

constexpr std::int64_t kTile = cuda::kFp8Tile;
constexpr c10::ScalarType kE4m3 = c10::ScalarType::Float8_e4m3fn;
// cuBLASLt reads a row of 128 x 128 block scales (k / 128 floats) 16-byte
// aligned: k a multiple of 4 x 128 (with PyTorch 2.11 a k of 384 read
// garbage on an H100; later PyTorch versions may pad the scales' stride
// themselves, which would lift this).
constexpr std::int64_t kBlockScaleK = 4 * kTile;

// The tile's scale for every value of `values`: scales spread over their
// tiles' extent.
torch::Tensor ScalesPerValue(const Fp8Operand& o) {
  const std::int64_t rows = o.values.size(0), k = o.values.size(1);
  torch::Tensor s = o.scales.contiguous();
  if (o.blocks) s = s.repeat_interleave(kTile, 0);
  return s.repeat_interleave(kTile, 1).narrow(0, 0, rows).narrow(1, 0, k);
}

// The operand's e4m3 values for `in` [rows, cols] (transposed when asked),
// left to the caller's kernel to fill.
Fp8Operand EmptyOperand(const torch::Tensor& in, bool blocks, bool transpose) {
  Fp8Operand o;
  o.blocks = blocks;
  o.values = transpose ? torch::empty({in.size(1), in.size(0)}, in.options().dtype(kE4m3))
                       : torch::empty(in.sizes(), in.options().dtype(kE4m3));
  return o;
}

Fp8Operand QuantizedBlocks(const torch::Tensor& in, bool transpose) {
  Fp8Operand o = EmptyOperand(in, /*blocks=*/true, transpose);
  o.scales = torch::empty({o.values.size(0) / kTile, o.values.size(1) / kTile}, in.options().dtype(torch::kFloat));
  Check(cuda::QuantizeFp8BlockTiles(in.size(0), in.size(1), in.data_ptr(), in.scalar_type() == torch::kBFloat16,
                                    transpose, OutBytes(o.values), Out(o.scales), c10::cuda::getCurrentCUDAStream()),
        "FP8 quantisation (blocks)");
  return o;
}

// 1 x 128 scales are column-major: allocated as their transpose.
Fp8Operand QuantizedTiles(const torch::Tensor& in, bool transpose) {
  Fp8Operand o = EmptyOperand(in, /*blocks=*/false, transpose);
  torch::Tensor scales_t =
      torch::empty({o.values.size(1) / kTile, o.values.size(0)}, in.options().dtype(torch::kFloat));
  const bool bf16 = in.scalar_type() == torch::kBFloat16;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const std::int64_t rows = in.size(0), cols = in.size(1);
  const auto quantize = transpose ? cuda::QuantizeFp8ColumnTilesTransposed : cuda::QuantizeFp8RowTiles;
  Check(quantize(rows, cols, in.data_ptr(), bf16, OutBytes(o.values), Out(scales_t), stream),
        "FP8 quantisation (tiles)");
  o.scales = scales_t.t();
  return o;
}

}  // namespace

// Hopper (sm_90) only: the blockwise-scaled FP8 GEMM has not been run on a
// newer GPU here.
bool Fp8GemmApplies(const torch::Tensor& x) {
  return x.is_cuda() && ComputeCapabilityMajor(x.device()) == 9 &&
         (x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kBFloat16);
}

void CheckFp8GemmInput(const std::string& kernel, const char* name, const torch::Tensor& x) {
  TORCH_CHECK(Fp8GemmApplies(x), kernel, ": ", name, ": ", c10::toString(x.scalar_type()), " on ", x.device(),
              ", where bf16 or fp32 on a Hopper (sm_90) GPU is read");
}

Fp8Operand QuantizeFp8(const torch::Tensor& x, bool blocks, bool transpose) {
  const std::string name = std::string("QuantizeFp8 (") + (blocks ? "128 x 128 blocks" : "1 x 128 tiles") +
                           (transpose ? ", transposed)" : ")");
  CheckFp8GemmInput(name, "x", x);
  const bool rows_whole = blocks || transpose;
  TORCH_CHECK(x.dim() == 2 && x.size(1) % kTile == 0 && (!rows_whole || x.size(0) % kTile == 0), name,
              ": x: sizes ", x.sizes(), ", where [rows, cols] with cols", rows_whole ? " and rows" : "",
              " a multiple of 128 is read");
  CheckKernelInputs(name, {{"x", &x, {kAnySize, kAnySize}, kFloats}});
  const c10::cuda::CUDAGuard guard(x.device());
  const torch::Tensor in = x.contiguous();
  return blocks ? QuantizedBlocks(in, transpose) : QuantizedTiles(in, transpose);
}

torch::Tensor Fp8Matmul(const Fp8Operand& a, const Fp8Operand& b, c10::ScalarType out_dtype) {
  TORCH_CHECK(!(a.blocks && b.blocks), "Fp8Matmul: a and b both in 128 x 128 blocks, where one at most is read");
  TORCH_CHECK(out_dtype == torch::kBFloat16 || out_dtype == torch::kFloat, "Fp8Matmul: out_dtype ",
              c10::toString(out_dtype), ", where bf16 or fp32 is written");
  const std::int64_t k = a.values.size(-1);
  CheckKernelInputs("Fp8Matmul", {{"a", &a.values, {kAnySize, k}, {kE4m3}},
                                  {"b", &b.values, {kAnySize, k}, {kE4m3}}});
  for (const auto& [name, o] : {std::pair<const char*, const Fp8Operand*>{"a", &a}, {"b", &b}})
    TORCH_CHECK(o->values.size(0) % kTile == 0 && k % kTile == 0, "Fp8Matmul: ", name, ": sizes ", o->values.sizes(),
                ", where rows and k multiples of 128 are read");
  TORCH_CHECK(!(a.blocks || b.blocks) || k % kBlockScaleK == 0, "Fp8Matmul: k ", k,
              " with an operand in blocks, where a multiple of 512 is read (each row of block scales 16-byte aligned)");
  const c10::cuda::CUDAGuard guard(a.values.device());
  // cuBLASLt's FP8 GEMM is "TN": b enters as the column-major [k, n], its
  // scales transposed alike.
  return at::_scaled_mm(a.values, b.values.t(), a.scales, b.scales.t(), /*bias=*/std::nullopt,
                        /*scale_result=*/std::nullopt, out_dtype, /*use_fast_accum=*/false);
}

torch::Tensor DequantizeFp8(const Fp8Operand& o) { return o.values.to(torch::kFloat) * ScalesPerValue(o); }

#else  // no CUDA kernels in this build, or a LibTorch before 2.11

bool Fp8GemmApplies(const torch::Tensor&) { return false; }
void CheckFp8GemmInput(const std::string& kernel, const char*, const torch::Tensor&) {
  kernel_support::NoCudaKernels(kernel.c_str());
}
Fp8Operand QuantizeFp8(const torch::Tensor&, bool, bool) { kernel_support::NoCudaKernels("QuantizeFp8"); }
torch::Tensor Fp8Matmul(const Fp8Operand&, const Fp8Operand&, c10::ScalarType) {
  kernel_support::NoCudaKernels("Fp8Matmul");
}
torch::Tensor DequantizeFp8(const Fp8Operand&) { kernel_support::NoCudaKernels("DequantizeFp8"); }

#endif

}  // namespace kp::runtime
