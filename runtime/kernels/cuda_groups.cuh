// Rows in groups, as the MoE layer sorts its tokens by expert: group e's
// rows are [ends[e - 1], ends[e]) of one tensor (ends[-1] = 0), the ends
// int32 on the device, so no kernel needs the sizes on the host. The
// kernels that tile such rows by kGroupTile give each group whole tiles of
// its own: a group of n rows has ceil(n / kGroupTile) tiles, its last one
// partial, and tiles are numbered group after group ("padded" tile
// indices). Device code only.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_CUDA_GROUPS_CUH_
#define KIMI_PLAN_RUNTIME_KERNELS_CUDA_GROUPS_CUH_

#include <cstdint>

namespace kp::runtime::cuda {

constexpr int kGroupTile = 128;

/// One padded tile: its group (-1 past the last group's last tile), the
/// first row it covers and how many of its rows are the group's.
struct GroupTile {
  int group = -1;
  std::int64_t first_row = 0;
  int rows = 0;
};

/// Tiles of a group of `rows` rows.
__device__ __forceinline__ std::int64_t GroupTiles(std::int64_t rows) { return (rows + kGroupTile - 1) / kGroupTile; }

/// Padded tile `tile` of `groups` groups. O(groups): every thread walks the
/// same ends, which the cache serves once.
__device__ __forceinline__ GroupTile FindGroupTile(const int* ends, int groups, std::int64_t tile) {
  std::int64_t tiles_before = 0, start = 0;
  for (int e = 0; e < groups; ++e) {
    const std::int64_t end = ends[e], tiles = GroupTiles(end - start);
    if (tile < tiles_before + tiles) {
      const std::int64_t first = start + (tile - tiles_before) * kGroupTile;
      return {e, first, static_cast<int>(end - first < kGroupTile ? end - first : kGroupTile)};
    }
    tiles_before += tiles;
    start = end;
  }
  return {};
}

/// Group `group`'s first padded tile and its number of tiles.
__device__ __forceinline__ void GroupTileRange(const int* ends, int group, std::int64_t& first_tile,
                                               std::int64_t& tiles) {
  first_tile = 0;
  std::int64_t start = 0;
  for (int e = 0; e < group; ++e) {
    first_tile += GroupTiles(ends[e] - start);
    start = ends[e];
  }
  tiles = GroupTiles(ends[group] - start);
}

}  // namespace kp::runtime::cuda

#endif  // KIMI_PLAN_RUNTIME_KERNELS_CUDA_GROUPS_CUH_
