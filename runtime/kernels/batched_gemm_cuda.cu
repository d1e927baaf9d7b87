// Kernels of batched_gemm_cuda.h. A block computes a 32 x 64 tile of one
// matrix's product with four warps (2 x 2, 16 x 32 each: four m16n8k8 TF32
// tiles), stepping k by 32 through shared memory. Each operand's tile is
// stored as it lies in memory (row-major or transposed), with a row stride
// that makes the warp's fragment reads conflict-free: 4 (mod 32) floats
// where a fragment reads (row g, column t), 8 (mod 32) where it reads
// (row t, column g). Many small blocks, little shared memory each: the
// occupancy hides the loads' latency.
#include "runtime/kernels/batched_gemm_cuda.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "runtime/kernels/cuda_mma.cuh"

namespace kp::runtime::cuda {
namespace {

constexpr int kBM = 32, kBN = 64, kBK = 32, kThreads = 128;
constexpr std::int64_t kMaxGrid = 65535;

// A tile of kRows x kCols floats as stored, rows kStride floats apart.
template <int kRows_, int kCols_, int kPad>
struct Tile {
  static constexpr int kRows = kRows_, kCols = kCols_, kStride = kCols + kPad, kFloats = kRows * kStride;
};

// op(A) tile [kBM, kBK]: row-major as [m][k] (fragment reads (g, t): pad 4),
// transposed as [k][m] (reads (t, g): pad 8).
template <bool kTransA>
using ATile = std::conditional_t<kTransA, Tile<kBK, kBM, 8>, Tile<kBM, kBK, 4>>;
// op(B) tile [kBK, kBN]: row-major as [k][n] (reads (t, g): pad 8),
// transposed as [n][k] (reads (g, t): pad 4).
template <bool kTransB>
using BTile = std::conditional_t<kTransB, Tile<kBN, kBK, 4>, Tile<kBK, kBN, 8>>;

// Four consecutive elements at `src` as fp32.
__device__ __forceinline__ float4 Load4(const float* src) { return *reinterpret_cast<const float4*>(src); }
__device__ __forceinline__ float4 Load4(const __nv_bfloat16* src) {
  const uint2 raw = *reinterpret_cast<const uint2*>(src);
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

// Copies stored rows [r0, r0 + T::kRows) and columns [c0, c0 + T::kCols)
// of a matrix of `rows` x `cols` stored elements (unit column stride, row
// stride `ld`) into `tile` as fp32, zeros outside the matrix, four elements
// at a time (cols, ld and c0 are multiples of 4).
template <typename T, typename E>
__device__ __forceinline__ void LoadTile(float* tile, const E* src, std::int64_t ld, int rows, int cols, int r0,
                                         int c0) {
  for (int v = threadIdx.x; v < T::kRows * T::kCols / 4; v += kThreads) {
    const int r = v / (T::kCols / 4), c = v % (T::kCols / 4) * 4;
    float4 value = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r0 + r < rows && c0 + c < cols) value = Load4(src + static_cast<std::int64_t>(r0 + r) * ld + c0 + c);
    *reinterpret_cast<float4*>(tile + r * T::kStride + c) = value;
  }
}

// EB: b's element type (float or __nv_bfloat16).
template <bool kTransA, bool kTransB, typename EB>
__global__ void __launch_bounds__(kThreads) GemmKernel(int m, int n, int k, MatrixBatch a, MatrixBatch b,
                                                       float scale, float* __restrict__ out, bool accumulate,
                                                       std::int64_t batch_offset) {
  using TA = ATile<kTransA>;
  using TB = BTile<kTransB>;
  __shared__ __align__(16) float sa[TA::kFloats];
  __shared__ __align__(16) float sb[TB::kFloats];
  const std::int64_t item = batch_offset + blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const int wm = m0 + (warp / 2) * 16, wn = n0 + (warp % 2) * 32;  // the warp's 16 x 32
  const float* pa = static_cast<const float*>(a.data) + item * a.batch_stride;
  const EB* pb = static_cast<const EB*>(b.data) + item * b.batch_stride;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < k; k0 += kBK) {
    // Stored orientation: A [m][k] (row_stride) or [k][m] (col_stride);
    // B [k][n] or [n][k].
    if (kTransA)
      LoadTile<TA>(sa, pa, a.col_stride, k, m, k0, m0);
    else
      LoadTile<TA>(sa, pa, a.row_stride, m, k, m0, k0);
    if (kTransB)
      LoadTile<TB>(sb, pb, b.col_stride, n, k, n0, k0);
    else
      LoadTile<TB>(sb, pb, b.row_stride, k, n, k0, n0);
    __syncthreads();
    if (wm < m) {
#pragma unroll
      for (int kk = 0; kk < kBK; kk += 8) {
        const int am = wm - m0 + g;
        std::uint32_t frag[4];
        auto at_a = [&](int row, int col) {  // op(A)[row][col] in the tile's own indices
          return kTransA ? sa[col * TA::kStride + row] : sa[row * TA::kStride + col];
        };
        frag[0] = ToTf32(at_a(am, kk + t));
        frag[1] = ToTf32(at_a(am + 8, kk + t));
        frag[2] = ToTf32(at_a(am, kk + t + 4));
        frag[3] = ToTf32(at_a(am + 8, kk + t + 4));
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int bn = wn - n0 + 8 * j + g;
          auto at_b = [&](int row, int col) {  // op(B)[row][col]
            return kTransB ? sb[col * TB::kStride + row] : sb[row * TB::kStride + col];
          };
          MmaTf32(acc[j], frag, ToTf32(at_b(kk + t, bn)), ToTf32(at_b(kk + t + 4, bn)));
        }
      }
    }
    __syncthreads();
  }
  if (wm >= m) return;
  float* po = out + item * static_cast<std::int64_t>(m) * n;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int col = wn + 8 * j + 2 * t;
    if (col >= n) continue;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float2* at = reinterpret_cast<float2*>(po + static_cast<std::int64_t>(wm + g + 8 * half) * n + col);
      float2 value = make_float2(scale * acc[j][2 * half], scale * acc[j][2 * half + 1]);
      if (accumulate) {
        const float2 old = *at;
        value.x += old.x;
        value.y += old.y;
      }
      *at = value;
    }
  }
}

template <bool kTransA, bool kTransB>
cudaError_t Launch(std::int64_t batch, int m, int n, int k, const MatrixBatch& a, const MatrixBatch& b, float scale,
                   float* out, bool accumulate, cudaStream_t stream) {
  for (std::int64_t first = 0; first < batch; first += kMaxGrid) {
    const dim3 grid(static_cast<unsigned>((n + kBN - 1) / kBN), static_cast<unsigned>((m + kBM - 1) / kBM),
                    static_cast<unsigned>(std::min<std::int64_t>(kMaxGrid, batch - first)));
    if (b.bf16)
      GemmKernel<kTransA, kTransB, __nv_bfloat16>
          <<<grid, kThreads, 0, stream>>>(m, n, k, a, b, scale, out, accumulate, first);
    else
      GemmKernel<kTransA, kTransB, float><<<grid, kThreads, 0, stream>>>(m, n, k, a, b, scale, out, accumulate, first);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

bool Transposed(const MatrixBatch& x) { return x.row_stride == 1 && x.col_stride != 1; }

}  // namespace

bool BatchedGemmTf32Supports(std::int64_t batch, int m, int n, int k, const MatrixBatch& a, const MatrixBatch& b) {
  auto layout_ok = [](const MatrixBatch& x) {
    const std::int64_t ld = x.col_stride == 1 ? x.row_stride : x.col_stride;
    const bool one_unit = x.col_stride == 1 || x.row_stride == 1;
    const std::uintptr_t alignment = x.bf16 ? 8 : 16;
    return one_unit && ld % 4 == 0 && x.batch_stride % 4 == 0 &&
           reinterpret_cast<std::uintptr_t>(x.data) % alignment == 0;
  };
  return batch >= 0 && batch <= kMaxGrid * kMaxGrid && m > 0 && n > 0 && k > 0 && m % 16 == 0 && n % 8 == 0 &&
         k % 8 == 0 && !a.bf16 && layout_ok(a) && layout_ok(b);
}

cudaError_t BatchedGemmTf32(std::int64_t batch, int m, int n, int k, const MatrixBatch& a, const MatrixBatch& b,
                            float scale, float* out, bool accumulate, cudaStream_t stream) {
  if (!BatchedGemmTf32Supports(batch, m, n, k, a, b)) return cudaErrorInvalidValue;
  if (batch == 0) return cudaSuccess;
  const bool ta = Transposed(a), tb = Transposed(b);
  if (ta && tb) return Launch<true, true>(batch, m, n, k, a, b, scale, out, accumulate, stream);
  if (ta) return Launch<true, false>(batch, m, n, k, a, b, scale, out, accumulate, stream);
  if (tb) return Launch<false, true>(batch, m, n, k, a, b, scale, out, accumulate, stream);
  return Launch<false, false>(batch, m, n, k, a, b, scale, out, accumulate, stream);
}

}  // namespace kp::runtime::cuda
