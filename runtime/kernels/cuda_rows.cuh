// Device helpers of the row kernels (attn_res_cuda.cu, rms_norm_cuda.cu):
// one warp per row of fp32 or bf16 channels, fp32 arithmetic. A row kernel
// may take its channels in packs of P consecutive ones per lane (LoadN /
// StoreN): lane l then holds channels [32 P s + P l, 32 P s + P l + P) of
// stripe s, and a pack of kPack<T> is one 16-byte access.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_CUDA_ROWS_CUH_
#define KIMI_PLAN_RUNTIME_KERNELS_CUDA_ROWS_CUH_

#include <cstdint>

#include <cuda_bf16.h>

namespace kp::runtime::cuda::rowwise {

constexpr int kWarps = 8;  // rows per block of kWarps * 32 threads

__device__ __forceinline__ float Load(const float* p, std::int64_t i) { return p[i]; }
__device__ __forceinline__ float Load(const __nv_bfloat16* p, std::int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void Store(float* p, std::int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, std::int64_t i, float v) { p[i] = __float2bfloat16(v); }

/// Channels in one 16-byte access of T.
template <typename T>
constexpr int kPack = 16 / static_cast<int>(sizeof(T));

/// Channels [i, i + P) of p as fp32. For P a multiple of kPack<T>, p + i
/// must be 16-byte aligned (one 16-byte load per kPack<T> channels); bf16
/// with P a multiple of 4 only, 8-byte aligned.
template <int P>
__device__ __forceinline__ void LoadN(const float* p, std::int64_t i, float* out) {
  if constexpr (P % 4 == 0) {
#pragma unroll
    for (int k = 0; k < P; k += 4) {
      const float4 x = *reinterpret_cast<const float4*>(p + i + k);
      out[k] = x.x, out[k + 1] = x.y, out[k + 2] = x.z, out[k + 3] = x.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < P; ++k) out[k] = p[i + k];
  }
}
// bf16 channels [i, i + P) in accesses of Raw (uint4: 8 channels, uint2: 4).
template <typename Raw, int P>
__device__ __forceinline__ void LoadBf16Accesses(const __nv_bfloat16* p, std::int64_t i, float* out) {
  constexpr int kPairs = static_cast<int>(sizeof(Raw)) / 4;
#pragma unroll
  for (int k = 0; k < P; k += 2 * kPairs) {
    const Raw raw = *reinterpret_cast<const Raw*>(p + i + k);
    const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      const float2 f = __bfloat1622float2(pairs[j]);
      out[k + 2 * j] = f.x, out[k + 2 * j + 1] = f.y;
    }
  }
}
template <typename Raw, int P>
__device__ __forceinline__ void StoreBf16Accesses(__nv_bfloat16* p, std::int64_t i, const float* v) {
  constexpr int kPairs = static_cast<int>(sizeof(Raw)) / 4;
#pragma unroll
  for (int k = 0; k < P; k += 2 * kPairs) {
    Raw raw;
    auto* pairs = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
    for (int j = 0; j < kPairs; ++j) pairs[j] = __floats2bfloat162_rn(v[k + 2 * j], v[k + 2 * j + 1]);
    *reinterpret_cast<Raw*>(p + i + k) = raw;
  }
}

template <int P>
__device__ __forceinline__ void LoadN(const __nv_bfloat16* p, std::int64_t i, float* out) {
  if constexpr (P % 8 == 0) {
    LoadBf16Accesses<uint4, P>(p, i, out);
  } else if constexpr (P % 4 == 0) {  // 8-byte accesses: p + i 8-byte aligned
    LoadBf16Accesses<uint2, P>(p, i, out);
  } else {
#pragma unroll
    for (int k = 0; k < P; ++k) out[k] = __bfloat162float(p[i + k]);
  }
}

/// Writes channels [i, i + P) of p from fp32 (bf16: rounded to nearest
/// even), as LoadN reads them.
template <int P>
__device__ __forceinline__ void StoreN(float* p, std::int64_t i, const float* v) {
  if constexpr (P % 4 == 0) {
#pragma unroll
    for (int k = 0; k < P; k += 4) *reinterpret_cast<float4*>(p + i + k) = make_float4(v[k], v[k + 1], v[k + 2], v[k + 3]);
  } else {
#pragma unroll
    for (int k = 0; k < P; ++k) p[i + k] = v[k];
  }
}
template <int P>
__device__ __forceinline__ void StoreN(__nv_bfloat16* p, std::int64_t i, const float* v) {
  if constexpr (P % 8 == 0) {
    StoreBf16Accesses<uint4, P>(p, i, v);
  } else if constexpr (P % 4 == 0) {
    StoreBf16Accesses<uint2, P>(p, i, v);
  } else {
#pragma unroll
    for (int k = 0; k < P; ++k) p[i + k] = __float2bfloat16(v[k]);
  }
}

/// The sum over the warp's 32 lanes, in a fixed butterfly order.
__device__ __forceinline__ float WarpSum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

/// This thread's row: blockIdx.x * kWarps + its warp.
__device__ __forceinline__ std::int64_t Row() {
  return static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
}

inline unsigned Blocks(std::int64_t rows) { return static_cast<unsigned>((rows + kWarps - 1) / kWarps); }

}  // namespace kp::runtime::cuda::rowwise

#endif  // KIMI_PLAN_RUNTIME_KERNELS_CUDA_ROWS_CUH_
