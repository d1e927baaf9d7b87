// The CUDA kernels of the FP8 products (fp8_gemm.h): the blockwise
// quantisation of DeepSeek-V3's recipe, each tile's scale computed in the
// kernel that writes its e4m3 values (one read of the operand, one write of
// a byte per value), optionally writing the operand transposed, so that no
// bf16 transpose is ever copied. The products themselves are cuBLASLt's
// (fp8_gemm.cc). Plain pointers and a stream; fp8_gemm.cc wraps them.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_FP8_GEMM_CUDA_H_
#define KIMI_PLAN_RUNTIME_KERNELS_FP8_GEMM_CUDA_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace kp::runtime::cuda {

/// The side of a tile along each dimension it spans.
constexpr std::int64_t kFp8Tile = 128;

/// Every quantisation below: a tile's scale = amax / 448 (1 when the tile
/// is all zero), and each value e4m3(x / scale), round to nearest even,
/// saturated at +-448. x [rows, cols] row-major, bf16 when `x_bf16`, else fp32.

/// 1 x 128 tiles along x's rows (cols a multiple of kFp8Tile): q [rows,
/// cols]; tile t of row r's scale at scales[t * rows + r] (column-major, as
/// cuBLASLt reads a 1 x 128 operand's scales).
cudaError_t QuantizeFp8RowTiles(std::int64_t rows, std::int64_t cols, const void* x, bool x_bf16, std::uint8_t* q,
                                float* scales, cudaStream_t stream);

/// 128 x 1 tiles along x's columns (rows a multiple of kFp8Tile, cols of
/// 32), written transposed: q [cols, rows], which is x^T in 1 x 128 tiles,
/// its scales column-major as above (tile t of column c at t * cols + c).
cudaError_t QuantizeFp8ColumnTilesTransposed(std::int64_t rows, std::int64_t cols, const void* x, bool x_bf16,
                                             std::uint8_t* q, float* scales, cudaStream_t stream);

/// A bound on the padded tiles of `rows` rows in `groups` groups, each
/// group's rows starting a tile of their own (cuda_groups.cuh): sum_e
/// ceil(n_e / 128) <= ceil(rows / 128) + groups.
constexpr std::int64_t GroupedTileCapacity(std::int64_t rows, std::int64_t groups) {
  return (rows + kFp8Tile - 1) / kFp8Tile + groups;
}

/// QuantizeFp8ColumnTilesTransposed for rows in groups (cuda_groups.cuh:
/// group e's rows end at ends[e], on the device; rows a multiple of nothing):
/// each group's 128 x 1 tiles start at its first row, its last tile padded
/// with zeros, and padded tile p of column c is written at q[c * ld + 128 p
/// ..] (ld = 128 tile_capacity) with its scale at scales[p * cols + c]. Tiles
/// past the groups' last (up to tile_capacity, which must be at least
/// sum_e ceil(n_e / 128), e.g. GroupedTileCapacity) are left unwritten.
cudaError_t QuantizeFp8GroupedColumnTilesTransposed(std::int64_t rows, std::int64_t cols, const void* x,
                                                    bool x_bf16, const int* ends, int groups,
                                                    std::int64_t tile_capacity, std::uint8_t* q, float* scales,
                                                    cudaStream_t stream);

/// 128 x 128 blocks (rows and cols multiples of kFp8Tile): q [rows, cols]
/// and block (i, j)'s scale at scales[i * (cols / 128) + j] (row-major);
/// with `transpose`, q [cols, rows] = x^T's blocks and their scales
/// row-major over x^T's blocks (block (j, i) at j * (rows / 128) + i).
/// With `batch` > 1, x holds that many rows x cols matrices one after the
/// other, and q and scales as many results.
cudaError_t QuantizeFp8BlockTiles(std::int64_t rows, std::int64_t cols, const void* x, bool x_bf16, bool transpose,
                                  std::uint8_t* q, float* scales, cudaStream_t stream, std::int64_t batch = 1);

}  // namespace kp::runtime::cuda

#endif  // KIMI_PLAN_RUNTIME_KERNELS_FP8_GEMM_CUDA_H_
