// FP8 products as DeepSeek-V3 trains its experts (the planner's
// fp8-blockwise recipe, Megatron's --fp8-recipe blockwise): e4m3 operands
// with one fp32 scale per 1x128 tile of the activations and per 128x128
// block of the weights, products accumulated in fp32.
//
// On a Hopper GPU the products run on FP8 tensor cores (cuBLASLt's
// blockwise-scaled GEMM over e4m3 operands quantised by this project's
// kernel). Everywhere else (the CPU; LibTorch 1.13 has no float8 dtype)
// each operand is quantised to the e4m3 grid with its block scales and
// dequantised to fp32 ("fake quantisation") and the product runs in fp32:
// the same operands, the sums in another order.
// Thread-safety: pure functions.
#ifndef KIMI_PLAN_RUNTIME_MODEL_FP8_LINEAR_H_
#define KIMI_PLAN_RUNTIME_MODEL_FP8_LINEAR_H_

#include <cstdint>

#include <torch/torch.h>

namespace kp::runtime {

/// The largest finite e4m3 (e4m3fn: no infinities) value, 1.75 x 2^8.
constexpr double kE4m3Max = 448.0;
/// The tile of the recipe's block scaling along a product's reduced and kept dimensions.
constexpr std::int64_t kFp8Block = 128;

/// Each value of `v` rounded to the nearest e4m3fn value (OCP FP8: 1 sign
/// bit, 4 exponent bits biased by 7, 3 mantissa bits, subnormals below
/// 2^-6; no infinities), ties to the even mantissa, saturated at
/// +-kE4m3Max; NaN stays NaN. fp32 in, fp32 out (other float dtypes are
/// converted to fp32 first).
torch::Tensor RoundToE4m3(const torch::Tensor& v);

/// x [rows, cols] as FP8 with a scale per tile of tile_rows x tile_cols
/// (the last tiles along each dimension partial): scale = amax(|tile|) /
/// kE4m3Max in fp32 (1 for an all-zero tile), and the dequantised values
/// RoundToE4m3(x / scale) * scale, fp32, x's shape.
torch::Tensor FakeQuantizeFp8Blocks(const torch::Tensor& x, std::int64_t tile_rows, std::int64_t tile_cols);

/// y = x w^T, x [..., in], w [out, in], in the blockwise FP8 recipe:
///   forward  y  = Q(x; 1x128) Q(w; 128x128)^T
///   backward dx = Q(dy; 1x128) Q(w; 128x128)
///            dw = Q(dy; 128x1)^T Q(x; 128x1)     (tiles along the tokens)
/// with Q(t; r x c) = FakeQuantizeFp8Blocks(t rows-major as [tokens, width],
/// r, c). y and dx in x's dtype, dw in w's. On a Hopper or newer GPU of a
/// build with the CUDA kernels the products run on FP8 tensor cores
/// (runtime/kernels/fp8_gemm.h: the same e4m3 operands, each 128-wide slice
/// of a sum accumulated in fp32); elsewhere as Fp8LinearEmulated.
torch::Tensor Fp8Linear(const torch::Tensor& x, const torch::Tensor& w);

/// Fp8Linear's arithmetic on any device and LibTorch: the operands
/// quantised and dequantised to fp32, every product an fp32 GEMM. The
/// reference the tensor-core path is tested against.
torch::Tensor Fp8LinearEmulated(const torch::Tensor& x, const torch::Tensor& w);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_MODEL_FP8_LINEAR_H_
