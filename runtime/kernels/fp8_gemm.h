// LibTorch face of the FP8 products on tensor cores (fp8_gemm_cuda.h for the
// quantisation; cuBLASLt through at::_scaled_mm for the products, its
// blockwise scaling: fp32 scales per 1 x 128 tile or 128 x 128 block applied
// to each 128-wide slice of the reduction in fp32). In a build without the
// CUDA kernels (no CUDA Toolkit or a CPU LibTorch, whose 1.13 has no float8
// dtype) Fp8GemmApplies returns false and runtime/model/fp8_linear.h
// emulates the same arithmetic.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_FP8_GEMM_H_
#define KIMI_PLAN_RUNTIME_KERNELS_FP8_GEMM_H_

#include <cstdint>
#include <string>

#include <torch/torch.h>

// Whether this build has the FP8 kernels: the CUDA kernels and a LibTorch
// with cuBLASLt's blockwise-scaled GEMM through at::_scaled_mm (run and
// tested with PyTorch 2.11, CUDA 13; earlier LibTorch builds emulate).
// For the kernel families' faces, not their callers (who ask *Applies).
#if defined(KIMI_PLAN_CUDA_KERNELS) && \
    (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 11))
#define KIMI_PLAN_FP8_KERNELS 1
#else
#define KIMI_PLAN_FP8_KERNELS 0
#endif

namespace kp::runtime {

/// An operand [rows, k] in e4m3 with its tiles' fp32 scales: for 1 x 128
/// tiles scales [rows, k / 128] column-major (stride 1, rows), for 128 x 128
/// blocks [rows / 128, k / 128] row-major — the layouts cuBLASLt reads.
struct Fp8Operand {
  torch::Tensor values;  ///< float8_e4m3fn [rows, k], row-major
  torch::Tensor scales;  ///< fp32
  bool blocks = false;   ///< 128 x 128 blocks, else 1 x 128 tiles
};

/// True when the kernels take x: built (with PyTorch 2.11 or later's
/// LibTorch), x bf16 or fp32 on a Hopper (sm_90) GPU, the only one the
/// blockwise-scaled GEMM has run on here.
bool Fp8GemmApplies(const torch::Tensor& x);

/// Throws c10::Error "KERNEL: NAME: DTYPE on DEVICE, where bf16 or fp32 on
/// a Hopper (sm_90) GPU is read" unless Fp8GemmApplies(x): the first check
/// of every entry that quantises (here and fp8_grouped_gemm.h).
void CheckFp8GemmInput(const std::string& kernel, const char* name, const torch::Tensor& x);

/// x [rows, cols] (bf16 or fp32) as an FP8 operand: x itself, or x^T when
/// `transpose` (written transposed by the kernel, no bf16 copy), in 1 x 128
/// tiles along the operand's rows, or 128 x 128 blocks when `blocks`. Each
/// tile's scale is amax / 448 (1 for an all-zero tile) and its values
/// e4m3(x / scale): FakeQuantizeFp8Blocks's bit for bit once dequantised.
/// Read: cols a multiple of 128; rows too for blocks or a transpose.
/// Another shape, dtype or device is an error naming x.
Fp8Operand QuantizeFp8(const torch::Tensor& x, bool blocks, bool transpose = false);

/// a b^T for a [m, k] and b [n, k] (m, n and k multiples of 128, k of 512
/// where an operand is in blocks: cuBLASLt reads each row of block scales
/// 16-byte aligned; at most one of them in blocks), in `out_dtype` (bf16 or
/// fp32): each 128-wide slice of k accumulated on the tensor cores and
/// scaled by its two tiles' scales in fp32.
torch::Tensor Fp8Matmul(const Fp8Operand& a, const Fp8Operand& b, c10::ScalarType out_dtype);

/// `values` dequantised to fp32 (values x their tile's scale): what the
/// tests compare with the LibTorch form.
torch::Tensor DequantizeFp8(const Fp8Operand& operand);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_KERNELS_FP8_GEMM_H_
