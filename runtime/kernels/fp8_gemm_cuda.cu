// Kernels of fp8_gemm_cuda.h. The scale and the quotient are IEEE fp32
// divisions (no fast-math here) and the conversion rounds to nearest even
// with saturation, which is runtime/model/fp8_linear.h's RoundToE4m3 of the
// same quotient: the kernels' values are the LibTorch form's bit for bit.
// Reads are coalesced (a warp reads a row's consecutive values); the
// transposed outputs pass through shared memory so that writes are too.
#include "runtime/kernels/fp8_gemm_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "runtime/kernels/cuda_groups.cuh"

namespace kp::runtime::cuda {
namespace {

constexpr float kE4m3Max = 448.0f;
constexpr int kWarp = 32;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr int kTile = static_cast<int>(kFp8Tile);

__device__ __forceinline__ float Load(const void* x, std::int64_t i, bool bf16) {
  return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(x)[i]) : static_cast<const float*>(x)[i];
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ __forceinline__ float ScaleOf(float amax) {
  const float scale = __fdiv_rn(amax, kE4m3Max);
  return scale > 0.0f ? scale : 1.0f;
}

__device__ __forceinline__ std::uint8_t ToE4m3(float v, float scale) {
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(__fdiv_rn(v, scale), __NV_SATFINITE, __NV_E4M3));
}

// One warp per 1 x 128 tile: lane l holds values 4l..4l+3.
__global__ void RowTilesKernel(std::int64_t rows, std::int64_t cols, const void* __restrict__ x, bool bf16,
                               std::uint8_t* __restrict__ q, float* __restrict__ scales) {
  constexpr int kPerLane = kTile / kWarp;
  const std::int64_t tiles_per_row = cols / kTile;
  const std::int64_t tile = (blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x) / kWarp;
  if (tile >= rows * tiles_per_row) return;  // whole warps leave together
  const int lane = threadIdx.x % kWarp;
  const std::int64_t r = tile / tiles_per_row, t = tile % tiles_per_row;
  const std::int64_t first = r * cols + t * kTile + lane * kPerLane;
  float v[kPerLane];
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    v[j] = Load(x, first + j, bf16);
    amax = fmaxf(amax, fabsf(v[j]));
  }
  const float scale = ScaleOf(WarpMax(amax));
  std::uint32_t packed = 0;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) packed |= std::uint32_t{ToE4m3(v[j], scale)} << (8 * j);
  *reinterpret_cast<std::uint32_t*>(q + first) = packed;
  if (lane == 0) scales[t * rows + r] = scale;
}

// One block per 128 x 32 slab of x (128 rows, 32 columns): thread (warp w,
// lane l) reads column l of rows w, w + 8, ..., so each column's 128 values
// are spread over the 8 warps; the columns' amaxes meet in shared memory,
// and the e4m3 bytes are staged there as x^T's 32 rows of 128 before a
// 16-byte store per thread. The staged rows are 144 bytes apart: at 128 a
// warp's 32 byte writes (one per row) all fell in one bank (32-way
// conflict); at 144 they spread over 8 banks, and rows stay 16-byte aligned.
// With `ends`, the block's 128 rows are padded tile blockIdx.x / slabs of
// the groups (cuda_groups.cuh), rows past its group's end read as zeros;
// x^T's rows are q_ld bytes apart.
__global__ void ColumnTilesTransposedKernel(std::int64_t rows, std::int64_t cols, const void* __restrict__ x,
                                            bool bf16, const int* __restrict__ ends, int groups, std::int64_t q_ld,
                                            std::uint8_t* __restrict__ q, float* __restrict__ scales) {
  constexpr int kCols = kWarp, kRowsPerThread = kTile / kWarps;
  __shared__ float partial[kWarps][kCols];
  __shared__ float column_scale[kCols];
  __shared__ alignas(16) std::uint8_t staged[kCols][kTile + 16];
  const std::int64_t slabs_per_tile_row = cols / kCols;
  const std::int64_t tile_row = blockIdx.x / slabs_per_tile_row;  // which 128 rows
  const std::int64_t c0 = (blockIdx.x % slabs_per_tile_row) * kCols;
  GroupTile tile{0, tile_row * kTile, kTile};
  if (ends != nullptr) {
    tile = FindGroupTile(ends, groups, tile_row);
    if (tile.group < 0) return;  // past the last group: the whole block leaves
  }
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float v[kRowsPerThread];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int r = warp + kWarps * i;
    v[i] = r < tile.rows ? Load(x, (tile.first_row + r) * cols + c0 + lane, bf16) : 0.0f;
    amax = fmaxf(amax, fabsf(v[i]));
  }
  partial[warp][lane] = amax;
  __syncthreads();
  if (warp == 0) {
    float m = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, partial[w][lane]);
    const float scale = ScaleOf(m);
    column_scale[lane] = scale;
    scales[tile_row * cols + c0 + lane] = scale;
  }
  __syncthreads();
  const float scale = column_scale[lane];
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) staged[lane][warp + kWarps * i] = ToE4m3(v[i], scale);
  __syncthreads();
  // 32 columns x 128 bytes = 256 threads x 16 bytes.
  constexpr int kChunks = kTile / 16;
  const int c = threadIdx.x / kChunks, chunk = threadIdx.x % kChunks;
  *reinterpret_cast<uint4*>(q + (c0 + c) * q_ld + tile_row * kTile + chunk * 16) =
      *reinterpret_cast<const uint4*>(&staged[c][chunk * 16]);
}

// One block per 128 x 128 block of x: thread (warp w, lane l) reads
// columns 4l..4l+3 of rows w, w + 8, ... (64 values, kept in registers
// between the amax and the quantisation). Transposed, the bytes go through
// shared memory as the 128 x 128 block of x^T.
// blockIdx.y: which matrix of a batch of them, each rows x cols.
__global__ void BlockTilesKernel(std::int64_t rows, std::int64_t cols, const void* __restrict__ x, bool bf16,
                                 bool transpose, std::uint8_t* __restrict__ q, float* __restrict__ scales) {
  constexpr int kPerLane = kTile / kWarp, kRowsPerThread = kTile / kWarps;
  __shared__ float warp_max[kWarps];
  __shared__ alignas(16) std::uint8_t staged[kTile][kTile + 16];
  const std::int64_t matrix = blockIdx.y;
  x = static_cast<const char*>(x) + matrix * rows * cols * (bf16 ? 2 : 4);
  q += matrix * rows * cols;
  scales += matrix * (rows / kTile) * (cols / kTile);
  const std::int64_t blocks_per_row = cols / kTile;
  const std::int64_t bi = blockIdx.x / blocks_per_row, bj = blockIdx.x % blocks_per_row;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float v[kRowsPerThread][kPerLane];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const std::int64_t first = (bi * kTile + warp + kWarps * i) * cols + bj * kTile + lane * kPerLane;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      v[i][j] = Load(x, first + j, bf16);
      amax = fmaxf(amax, fabsf(v[i][j]));
    }
  }
  amax = WarpMax(amax);
  if (lane == 0) warp_max[warp] = amax;
  __syncthreads();
  float m = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m = fmaxf(m, warp_max[w]);
  const float scale = ScaleOf(m);
  if (!transpose) {
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      std::uint32_t packed = 0;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) packed |= std::uint32_t{ToE4m3(v[i][j], scale)} << (8 * j);
      *reinterpret_cast<std::uint32_t*>(q + (bi * kTile + warp + kWarps * i) * cols + bj * kTile +
                                        lane * kPerLane) = packed;
    }
    if (threadIdx.x == 0) scales[bi * blocks_per_row + bj] = scale;
    return;
  }
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) staged[lane * kPerLane + j][warp + kWarps * i] = ToE4m3(v[i][j], scale);
  __syncthreads();
  // x^T's block: 128 rows of 128 bytes = 256 threads x 4 stores of 16 bytes.
  constexpr int kChunks = kTile / 16;
  for (int idx = threadIdx.x; idx < kTile * kChunks; idx += kThreads) {
    const int r = idx / kChunks, chunk = idx % kChunks;
    *reinterpret_cast<uint4*>(q + (bj * kTile + r) * rows + bi * kTile + chunk * 16) =
        *reinterpret_cast<const uint4*>(&staged[r][chunk * 16]);
  }
  if (threadIdx.x == 0) scales[bj * (rows / kTile) + bi] = scale;
}

}  // namespace

cudaError_t QuantizeFp8RowTiles(std::int64_t rows, std::int64_t cols, const void* x, bool x_bf16, std::uint8_t* q,
                                float* scales, cudaStream_t stream) {
  const std::int64_t tiles = rows * (cols / kFp8Tile);
  if (tiles == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>((tiles + kWarps - 1) / kWarps);
  RowTilesKernel<<<blocks, kThreads, 0, stream>>>(rows, cols, x, x_bf16, q, scales);
  return cudaGetLastError();
}

namespace {

cudaError_t ColumnTilesTransposed(std::int64_t rows, std::int64_t cols, const void* x, bool x_bf16, const int* ends,
                                  int groups, std::int64_t tiles, std::uint8_t* q, float* scales,
                                  cudaStream_t stream) {
  const std::int64_t blocks = tiles * (cols / kWarp);
  if (blocks == 0) return cudaSuccess;
  ColumnTilesTransposedKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      rows, cols, x, x_bf16, ends, groups, tiles * kFp8Tile, q, scales);
  return cudaGetLastError();
}

}  // namespace

cudaError_t QuantizeFp8ColumnTilesTransposed(std::int64_t rows, std::int64_t cols, const void* x, bool x_bf16,
                                             std::uint8_t* q, float* scales, cudaStream_t stream) {
  return ColumnTilesTransposed(rows, cols, x, x_bf16, nullptr, 0, rows / kFp8Tile, q, scales, stream);
}

cudaError_t QuantizeFp8GroupedColumnTilesTransposed(std::int64_t rows, std::int64_t cols, const void* x,
                                                    bool x_bf16, const int* ends, int groups,
                                                    std::int64_t tile_capacity, std::uint8_t* q, float* scales,
                                                    cudaStream_t stream) {
  return ColumnTilesTransposed(rows, cols, x, x_bf16, ends, groups, tile_capacity, q, scales, stream);
}

cudaError_t QuantizeFp8BlockTiles(std::int64_t rows, std::int64_t cols, const void* x, bool x_bf16, bool transpose,
                                  std::uint8_t* q, float* scales, cudaStream_t stream, std::int64_t batch) {
  const std::int64_t blocks = (rows / kFp8Tile) * (cols / kFp8Tile);
  if (blocks == 0 || batch == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(batch));
  BlockTilesKernel<<<grid, kThreads, 0, stream>>>(rows, cols, x, x_bf16, transpose, q, scales);
  return cudaGetLastError();
}

}  // namespace kp::runtime::cuda
