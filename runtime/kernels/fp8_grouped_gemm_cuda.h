// The CUDA kernel of the grouped FP8 products (fp8_grouped_gemm.h): every
// expert's product in one launch, over operands that fp8_gemm_cuda.h's
// kernels quantise (e4m3, an fp32 scale per 1 x 128 tile or 128 x 128
// block). Each 128-wide slice of the reduction runs on FP8 tensor cores
// (mma.sync m16n8k32, fp32 accumulation), is scaled by its two tiles'
// scales in fp32 and added to the result (DeepSeek-V3's promotion). Groups
// as cuda_groups.cuh: their ends int32 on the device, never read by the
// host. Plain pointers and a stream; fp8_grouped_gemm.cc wraps them.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_FP8_GROUPED_GEMM_CUDA_H_
#define KIMI_PLAN_RUNTIME_KERNELS_FP8_GROUPED_GEMM_CUDA_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace kp::runtime::cuda {

/// out[r, :] = a[r, :] b_e^T for each row r of group e:
///   a [m, k] e4m3 in 1 x 128 tiles, tile t of row r scaled by
///     a_scales[t * m + r];
///   b [groups, n, k] e4m3 in 128 x 128 blocks, block (i, t) of group e
///     scaled by b_scales[(e * n / 128 + i) * k / 128 + t];
///   out [m, n], bf16 when `out_bf16`, else fp32.
/// n and k multiples of 128; every pointer 16-byte aligned; ends[groups - 1]
/// = m (rows past it are not written).
cudaError_t Fp8GroupedRowsMatmul(std::int64_t m, std::int64_t n, std::int64_t k, int groups, const int* ends,
                                 const std::uint8_t* a, const float* a_scales, const std::uint8_t* b,
                                 const float* b_scales, bool out_bf16, void* out, cudaStream_t stream);

/// out_e = a_e b_e^T for each group e, reducing over the group's rows:
///   a [n_a, 128 tile_capacity] e4m3, b [n_b, 128 tile_capacity] e4m3, both
///     laid out as QuantizeFp8GroupedColumnTilesTransposed writes them (group
///     e's padded tiles along k, tile p of row r scaled by
///     a_scales[p * n_a + r], b_scales[p * n_b + r]);
///   out [groups, n_a, n_b], bf16 when `out_bf16`, else fp32; an empty
///     group's product is zero.
/// n_a and n_b multiples of 128; every pointer 16-byte aligned.
cudaError_t Fp8GroupedReductionMatmul(std::int64_t n_a, std::int64_t n_b, std::int64_t tile_capacity, int groups,
                                      const int* ends, const std::uint8_t* a, const float* a_scales,
                                      const std::uint8_t* b, const float* b_scales, bool out_bf16, void* out,
                                      cudaStream_t stream);

}  // namespace kp::runtime::cuda

#endif  // KIMI_PLAN_RUNTIME_KERNELS_FP8_GROUPED_GEMM_CUDA_H_
