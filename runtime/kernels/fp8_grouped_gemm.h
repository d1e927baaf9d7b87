// LibTorch face of the grouped FP8 products (fp8_grouped_gemm_cuda.h): the
// products of every expert of an MoE layer in one launch each, in the
// blockwise recipe of fp8_gemm.h (DeepSeek-V3's: e4m3 operands, an fp32
// scale per 1 x 128 tile of activations and 128 x 128 block of weights,
// each 128-wide slice of a sum accumulated in fp32). The rows come sorted
// by expert with the groups' ends on the device (cuda_groups.cuh), as the
// MoE layer makes them, so nothing here reads sizes back to the host.
//
//   forward  y  = x w_e^T     Fp8GroupedMatmul(x tiles, w blocks)
//   dgrad    dx = dy w_e      Fp8GroupedMatmul(dy tiles, w^T blocks)
//   wgrad    dw_e = dy_e^T x_e  Fp8GroupedWeightGrad(dy^T, x^T): both in
//            1 x 128 tiles along each group's own rows (its last tile
//            padded with zeros), as the per-expert form quantises them.
//
// In a build without the FP8 kernels (fp8_gemm.h) Fp8GroupedGemmApplies
// is false and the entries throw.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_FP8_GROUPED_GEMM_H_
#define KIMI_PLAN_RUNTIME_KERNELS_FP8_GROUPED_GEMM_H_

#include <torch/torch.h>

#include "runtime/kernels/fp8_gemm.h"

namespace kp::runtime {

/// True when the grouped kernels take x: as Fp8GemmApplies.
bool Fp8GroupedGemmApplies(const torch::Tensor& x);

/// Every expert's weight w [E, n, k] (bf16 or fp32; n and k multiples of
/// 128) in 128 x 128 blocks: values [E, n, k], scales [E, n / 128, k / 128];
/// with `transpose` each w_e^T: values [E, k, n], scales [E, k / 128, n / 128].
/// One launch for all experts.
Fp8Operand QuantizeFp8Experts(const torch::Tensor& w, bool transpose);

/// x [rows, cols] (bf16 or fp32, cols a multiple of 128) whose rows are
/// in groups ending at `ends` (int32 [E] on x's device, ends[E - 1] = rows)
/// as x^T in 1 x 128 tiles along each group's rows: values [cols, 128 P],
/// group e's tiles at its padded tile indices (cuda_groups.cuh), scales
/// [cols, P] column-major, with P = ceil(rows / 128) + E, a bound on the
/// tiles; tiles past the last group's are not written.
Fp8Operand QuantizeFp8GroupedTransposed(const torch::Tensor& x, const torch::Tensor& ends);

/// out [m, n] in `out_dtype` (bf16 or fp32), row r of group e = a[r] b_e^T:
/// a [m, k] in 1 x 128 tiles (QuantizeFp8), b [E, n, k] in blocks
/// (QuantizeFp8Experts), ends as above with m rows.
torch::Tensor Fp8GroupedMatmul(const Fp8Operand& a, const Fp8Operand& b, const torch::Tensor& ends,
                               c10::ScalarType out_dtype);

/// out [E, n_a, n_b] in `out_dtype`, out_e = a_e b_e^T summed over group e's
/// rows: a [n_a, 128 P] and b [n_b, 128 P] from QuantizeFp8GroupedTransposed
/// with the same ends. An empty group's is zero.
torch::Tensor Fp8GroupedWeightGrad(const Fp8Operand& a, const Fp8Operand& b, const torch::Tensor& ends,
                                   c10::ScalarType out_dtype);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_KERNELS_FP8_GROUPED_GEMM_H_
