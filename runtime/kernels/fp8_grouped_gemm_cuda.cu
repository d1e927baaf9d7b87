// Kernels of fp8_grouped_gemm_cuda.h. One block computes a 128 x 128 tile
// of one group's product; both operands are k-contiguous e4m3, so a slice
// of 128 along k is two 16 KB tiles, brought into shared memory by cp.async
// one slice ahead of the tensor cores (two stages). Eight warps, 2 along m
// and 4 along n, each hold a 64 x 32 result as 4 x 4 mma tiles. A slice's
// products are summed apart (fresh accumulators) and then added to the
// result times the slice's row and column scales, in fp32: the scales
// change from slice to slice, so they cannot be applied once at the end.
//
// Why mma.sync and not wgmma: this is the grouped form that replaces one
// cuBLASLt call per expert (over 860 launches a layer for kimi-1b); the
// product itself is not yet at the FP8 peak (see docs/benchmarks.md).
#include "runtime/kernels/fp8_grouped_gemm_cuda.h"

#include <cuda_bf16.h>

#include "runtime/kernels/cuda_groups.cuh"
#include "runtime/kernels/cuda_mma.cuh"
#include "runtime/kernels/fp8_gemm_cuda.h"

namespace kp::runtime::cuda {
namespace {

constexpr int kTile = kGroupTile;  // the block's rows and columns, and one scale's slice of k
// Staged rows 144 bytes apart: a fragment load (lane 4g + t reading row g,
// bytes 4t..) then falls on bank 4g + t + const, all 32 distinct; rows stay
// 16-byte aligned for cp.async.
constexpr int kPitch = kTile + 16;
constexpr int kTileBytes = kTile * kPitch;
constexpr int kStageBytes = 2 * kTileBytes;  // a's tile, then b's
constexpr int kStages = 2;
constexpr int kSharedBytes = kStages * kStageBytes;
constexpr int kThreads = 256;
constexpr int kWarpsAlongN = 4;
constexpr int kWarpRows = 64, kWarpCols = 32;
constexpr int kMTiles = kWarpRows / 16, kNTiles = kWarpCols / 8;
constexpr int kMmaK = 32;
constexpr int kChunksPerRow = kTile / 16;  // cp.async moves 16 bytes

struct Args {
  std::int64_t m, n, k;  // GroupedReductionKernel: m = n_a, n = n_b, k = 128 tile_capacity
  int groups;
  const int* ends;
  const std::uint8_t* a;
  const float* a_scales;
  const std::uint8_t* b;
  const float* b_scales;
  bool out_bf16;
  void* out;
};

// The block's share: 128 rows of a from a_row (a_rows of them real, the
// rest read as zeros and not written), 128 rows of b from b_row, the
// reduction [k_begin, k_end) in whole slices, and where the result goes.
struct BlockProblem {
  const std::uint8_t* a;
  const std::uint8_t* b;
  std::int64_t ld;  // of a, b (both k-contiguous with the same k)
  std::int64_t a_row, b_row;
  int a_rows;
  std::int64_t k_begin, k_end;
  char* out;  // the result's first element
  std::int64_t out_ld;
};

// The thread's rows and columns of the block's tile: rows
// warp_m * 64 + 16 mi + g + 8 h (index 2 mi + h), columns
// warp_n * 32 + 8 ni + 2 t + j (index 2 ni + j).
struct Lanes {
  int row0, col0, g, t;
  __device__ int Row(int i) const { return row0 + 16 * (i / 2) + g + 8 * (i % 2); }
  __device__ int Col(int j) const { return col0 + 8 * (j / 2) + 2 * t + j % 2; }
};

__device__ Lanes LanesOf(int thread) {
  const int warp = thread / 32, lane = thread % 32;
  return {(warp / kWarpsAlongN) * kWarpRows, (warp % kWarpsAlongN) * kWarpCols, lane / 4, lane % 4};
}

// Scales of slice `tile` (its index among all of k's slices) for the
// thread's rows and columns.
struct RowsScales {  // a in 1 x 128 tiles, b's block one number
  const float* a_scales;
  std::int64_t m, a_row;
  int a_rows;
  const float* b_block;  // this block's row of b's block scales
  __device__ void Slice(std::int64_t tile, const Lanes& l, float (&rows)[2 * kMTiles],
                        float (&cols)[2 * kNTiles]) const {
#pragma unroll
    for (int i = 0; i < 2 * kMTiles; ++i)
      rows[i] = l.Row(i) < a_rows ? __ldg(a_scales + tile * m + a_row + l.Row(i)) : 0.0f;
    const float b = __ldg(b_block + tile);
#pragma unroll
    for (int j = 0; j < 2 * kNTiles; ++j) cols[j] = b;
  }
};

struct ReductionScales {  // both in 1 x 128 tiles along the reduction
  const float* a_scales;
  const float* b_scales;
  std::int64_t n_a, n_b, a_row, b_row;
  __device__ void Slice(std::int64_t tile, const Lanes& l, float (&rows)[2 * kMTiles],
                        float (&cols)[2 * kNTiles]) const {
#pragma unroll
    for (int i = 0; i < 2 * kMTiles; ++i) rows[i] = __ldg(a_scales + tile * n_a + a_row + l.Row(i));
#pragma unroll
    for (int j = 0; j < 2 * kNTiles; ++j) cols[j] = __ldg(b_scales + tile * n_b + b_row + l.Col(j));
  }
};

__device__ void LoadSlice(const BlockProblem& p, std::int64_t k, std::uint8_t* stage) {
  std::uint8_t* sa = stage;
  std::uint8_t* sb = stage + kTileBytes;
  for (int i = threadIdx.x; i < kTile * kChunksPerRow; i += kThreads) {
    const int row = i / kChunksPerRow, byte = (i % kChunksPerRow) * 16;
    const bool real = row < p.a_rows;
    CopyAsync16OrZero(sa + row * kPitch + byte, p.a + (p.a_row + (real ? row : 0)) * p.ld + k + byte, real);
    CopyAsync16(sb + row * kPitch + byte, p.b + (p.b_row + row) * p.ld + k + byte);
  }
  CopyAsyncCommit();
}

__device__ __forceinline__ std::uint32_t Word(const std::uint8_t* p) {
  return *reinterpret_cast<const std::uint32_t*>(p);
}

// A thread's accumulator tiles set to zero.
__device__ __forceinline__ void ZeroTiles(float (&tiles)[kMTiles][kNTiles][4]) {
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
    for (int ni = 0; ni < kNTiles; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) tiles[mi][ni][c] = 0.0f;
}

// The slice's products, on fresh accumulators.
__device__ void SliceProducts(const std::uint8_t* stage, const Lanes& l, float (&part)[kMTiles][kNTiles][4]) {
  const std::uint8_t* sa = stage;
  const std::uint8_t* sb = stage + kTileBytes;
  ZeroTiles(part);
  // Not unrolled: unrolled, the four steps' fragments live at once and the
  // thread needs more than 255 registers (spills).
#pragma unroll 1
  for (int kk = 0; kk < kTile; kk += kMmaK) {
    std::uint32_t af[kMTiles][4], bf[kNTiles][2];
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
      const std::uint8_t* r = sa + (l.row0 + 16 * mi + l.g) * kPitch + kk + 4 * l.t;
      af[mi][0] = Word(r);
      af[mi][1] = Word(r + 8 * kPitch);
      af[mi][2] = Word(r + 16);
      af[mi][3] = Word(r + 8 * kPitch + 16);
    }
#pragma unroll
    for (int ni = 0; ni < kNTiles; ++ni) {
      const std::uint8_t* r = sb + (l.col0 + 8 * ni + l.g) * kPitch + kk + 4 * l.t;
      bf[ni][0] = Word(r);
      bf[ni][1] = Word(r + 16);
    }
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNTiles; ++ni) MmaE4m3(part[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
  }
}

template <typename Scales>
__device__ void BlockProduct(const BlockProblem& p, const Scales& scales, bool out_bf16, std::uint8_t* shared) {
  const Lanes l = LanesOf(threadIdx.x);
  float acc[kMTiles][kNTiles][4];
  ZeroTiles(acc);
  const std::int64_t slices = (p.k_end - p.k_begin) / kTile;
  if (slices > 0) LoadSlice(p, p.k_begin, shared);
  for (std::int64_t s = 0; s < slices; ++s) {
    // The next slice's copies go out before this one's products; its stage
    // was last read in the previous iteration, which ended at a barrier.
    if (s + 1 < slices) {
      LoadSlice(p, p.k_begin + (s + 1) * kTile, shared + ((s + 1) % kStages) * kStageBytes);
      CopyAsyncWait<1>();
    } else {
      CopyAsyncWait<0>();
    }
    __syncthreads();
    float row_scale[2 * kMTiles], col_scale[2 * kNTiles];
    scales.Slice(p.k_begin / kTile + s, l, row_scale, col_scale);
    float part[kMTiles][kNTiles][4];
    SliceProducts(shared + (s % kStages) * kStageBytes, l, part);
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNTiles; ++ni)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          acc[mi][ni][c] = fmaf(part[mi][ni][c], row_scale[2 * mi + c / 2] * col_scale[2 * ni + c % 2],
                                acc[mi][ni][c]);
    __syncthreads();
  }
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = l.Row(2 * mi + h);
      if (row >= p.a_rows) continue;
#pragma unroll
      for (int ni = 0; ni < kNTiles; ++ni) {
        const std::int64_t at = row * p.out_ld + l.Col(2 * ni);
        const float v0 = acc[mi][ni][2 * h], v1 = acc[mi][ni][2 * h + 1];
        if (out_bf16)
          reinterpret_cast<__nv_bfloat162*>(p.out)[at / 2] = __floats2bfloat162_rn(v0, v1);
        else
          reinterpret_cast<float2*>(p.out)[at / 2] = make_float2(v0, v1);
      }
    }
}

// Grid (padded row tiles, n / 128): a padded tile past the groups' last
// leaves at once.
__global__ void __launch_bounds__(kThreads, 1) GroupedRowsKernel(Args args) {
  extern __shared__ __align__(16) std::uint8_t shared[];
  const GroupTile tile = FindGroupTile(args.ends, args.groups, blockIdx.x);
  if (tile.group < 0) return;
  const std::int64_t col = std::int64_t{blockIdx.y} * kTile;
  const std::int64_t bytes = args.out_bf16 ? 2 : 4;
  BlockProblem p;
  p.a = args.a;
  p.b = args.b + tile.group * args.n * args.k;
  p.ld = args.k;
  p.a_row = tile.first_row;
  p.b_row = col;
  p.a_rows = tile.rows;
  p.k_begin = 0;
  p.k_end = args.k;
  p.out = static_cast<char*>(args.out) + (tile.first_row * args.n + col) * bytes;
  p.out_ld = args.n;
  const std::int64_t slices = args.k / kTile;
  const RowsScales scales{args.a_scales, args.m, tile.first_row, tile.rows,
                          args.b_scales + (tile.group * (args.n / kTile) + blockIdx.y) * slices};
  BlockProduct(p, scales, args.out_bf16, shared);
}

// Grid (n_a / 128, n_b / 128, groups).
__global__ void __launch_bounds__(kThreads, 1) GroupedReductionKernel(Args args) {
  extern __shared__ __align__(16) std::uint8_t shared[];
  const int group = blockIdx.z;
  std::int64_t first_tile, tiles;
  GroupTileRange(args.ends, group, first_tile, tiles);
  const std::int64_t row = std::int64_t{blockIdx.x} * kTile, col = std::int64_t{blockIdx.y} * kTile;
  const std::int64_t bytes = args.out_bf16 ? 2 : 4;
  BlockProblem p;
  p.a = args.a;
  p.b = args.b;
  p.ld = args.k;
  p.a_row = row;
  p.b_row = col;
  p.a_rows = kTile;
  p.k_begin = first_tile * kTile;
  p.k_end = (first_tile + tiles) * kTile;
  p.out = static_cast<char*>(args.out) + ((group * args.m + row) * args.n + col) * bytes;
  p.out_ld = args.n;
  const ReductionScales scales{args.a_scales, args.b_scales, args.m, args.n, row, col};
  BlockProduct(p, scales, args.out_bf16, shared);
}

cudaError_t Launch(void (*kernel)(Args), dim3 grid, const Args& args, cudaStream_t stream) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;
  // Past the default 48 KB: asked for on each launch (cheap, and no state
  // kept here).
  const cudaError_t raised = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes);
  if (raised != cudaSuccess) return raised;
  kernel<<<grid, kThreads, kSharedBytes, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace

cudaError_t Fp8GroupedRowsMatmul(std::int64_t m, std::int64_t n, std::int64_t k, int groups, const int* ends,
                                 const std::uint8_t* a, const float* a_scales, const std::uint8_t* b,
                                 const float* b_scales, bool out_bf16, void* out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(GroupedTileCapacity(m, groups)), static_cast<unsigned>(n / kTile));
  return Launch(GroupedRowsKernel, grid, {m, n, k, groups, ends, a, a_scales, b, b_scales, out_bf16, out}, stream);
}

cudaError_t Fp8GroupedReductionMatmul(std::int64_t n_a, std::int64_t n_b, std::int64_t tile_capacity, int groups,
                                      const int* ends, const std::uint8_t* a, const float* a_scales,
                                      const std::uint8_t* b, const float* b_scales, bool out_bf16, void* out,
                                      cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(n_a / kTile), static_cast<unsigned>(n_b / kTile),
                  static_cast<unsigned>(groups));
  return Launch(GroupedReductionKernel, grid,
                {n_a, n_b, tile_capacity * kTile, groups, ends, a, a_scales, b, b_scales, out_bf16, out}, stream);
}

}  // namespace kp::runtime::cuda
