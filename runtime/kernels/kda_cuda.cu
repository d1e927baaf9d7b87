// Kernels of kda_cuda.h. The intra-chunk kernels replace the only part of
// KdaChunked whose torch form is memory-bound: the [chunks, C, C, dk] decay
// product. Here the C x C products are reduced over dk in registers, and
// their gradients are accumulated per channel, so nothing of size C*C*dk is
// ever stored.
#include "runtime/kernels/kda_cuda.h"

#include <cuda_bf16.h>

#include <type_traits>

#include "runtime/kernels/cuda_elementwise.cuh"
#include "runtime/kernels/cuda_mma.cuh"

namespace kp::runtime::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kSlice = 32;  // channels a block holds in shared memory at once

// exp(x) for x <= 0 (every argument here is one). __expf's error grows with
// |x| as x * 2^-24 relative; at the largest differences that matter (~20)
// that is ~1e-6, far inside fp32 KdaChunked's own rounding.
__device__ __forceinline__ float ExpNonPositive(float x) { return __expf(x); }

// One block per chunk, kThreads threads as a 16 x 16 grid; thread (ti, tj)
// owns rows i = ti + 16 * ri and columns j = tj + 16 * rj (R = C / 16 of
// each), so a warp's reads of a channel row are consecutive (no bank
// conflicts) and its rows are broadcasts.
template <int C>
__global__ void __launch_bounds__(kThreads) IntraForwardKernel(const float* __restrict__ q,
                                                              const float* __restrict__ k,
                                                              const float* __restrict__ g, float* __restrict__ a,
                                                              float* __restrict__ p, int dk) {
  constexpr int R = C / 16;
  // Channel-major, padded by one so the transposing store does not conflict.
  __shared__ float sq[kSlice][C + 1], sk[kSlice][C + 1], sg[kSlice][C + 1];
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * C * dk;
  const int ti = threadIdx.x / 16, tj = threadIdx.x % 16;
  float acc_a[R][R], acc_p[R][R];
  bool lower[R][R], strict[R][R];
#pragma unroll
  for (int ri = 0; ri < R; ++ri)
#pragma unroll
    for (int rj = 0; rj < R; ++rj) {
      acc_a[ri][rj] = acc_p[ri][rj] = 0.f;
      lower[ri][rj] = tj + 16 * rj <= ti + 16 * ri;
      strict[ri][rj] = tj + 16 * rj < ti + 16 * ri;
    }
  for (int c0 = 0; c0 < dk; c0 += kSlice) {
    for (int e = threadIdx.x; e < C * kSlice; e += kThreads) {
      const int row = e / kSlice, col = e % kSlice;
      const std::int64_t at = base + static_cast<std::int64_t>(row) * dk + c0 + col;
      sq[col][row] = q[at];
      sk[col][row] = k[at];
      sg[col][row] = g[at];
    }
    __syncthreads();
#pragma unroll 4
    for (int c = 0; c < kSlice; ++c) {
      float qi[R], ki[R], gi[R], kj[R], gj[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        qi[r] = sq[c][ti + 16 * r];
        ki[r] = sk[c][ti + 16 * r];
        gi[r] = sg[c][ti + 16 * r];
        kj[r] = sk[c][tj + 16 * r];
        gj[r] = sg[c][tj + 16 * r];
      }
#pragma unroll
      for (int ri = 0; ri < R; ++ri)
#pragma unroll
        for (int rj = 0; rj < R; ++rj) {
          // Above the diagonal G_i - G_j > 0 could overflow: never evaluated.
          const float kje = lower[ri][rj] ? kj[rj] * ExpNonPositive(gi[ri] - gj[rj]) : 0.f;
          acc_p[ri][rj] += qi[ri] * kje;
          acc_a[ri][rj] += ki[ri] * kje;
        }
    }
    __syncthreads();
  }
  const std::int64_t out = static_cast<std::int64_t>(blockIdx.x) * C * C;
#pragma unroll
  for (int ri = 0; ri < R; ++ri)
#pragma unroll
    for (int rj = 0; rj < R; ++rj) {
      const int i = ti + 16 * ri, j = tj + 16 * rj;
      a[out + i * C + j] = strict[ri][rj] ? acc_a[ri][rj] : 0.f;
      p[out + i * C + j] = lower[ri][rj] ? acc_p[ri][rj] : 0.f;
    }
}

// One block per (chunk, 32-channel slice); lane = channel, warp w handles
// rows w, w + 8, ... Row i's sums run over j <= i and column i's over
// j >= i, so every row costs C + 1 pair terms: the warps are balanced.
// Each channel's sums are independent, so no reduction crosses threads.
//
// With E_ij = exp(G_i - G_j) per channel (j <= i):
//   dq_i     = sum_{j<=i} dP_ij k_j E_ij
//   dk_i     = sum_{j<i}  dA_ij k_j E_ij  +  sum_{m>=i} dP_mi q_m E_mi + sum_{m>i} dA_mi k_m E_mi
//   dG_i     = q_i dq_i + k_i (row A part) - k_i (column part)
template <int C>
__global__ void __launch_bounds__(kThreads) IntraBackwardKernel(
    const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ g,
    const float* __restrict__ da, const float* __restrict__ dp, float* __restrict__ dq, float* __restrict__ dk,
    float* __restrict__ dg, int dkw) {
  extern __shared__ float smem[];
  float* sq = smem;                  // [C][kSlice]
  float* sk = sq + C * kSlice;       // [C][kSlice]
  float* sg = sk + C * kSlice;       // [C][kSlice]
  float* sda = sg + C * kSlice;      // [C][C]
  float* sdp = sda + C * C;          // [C][C]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, c0 = blockIdx.y * kSlice;
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * C * dkw;
  const std::int64_t square = static_cast<std::int64_t>(blockIdx.x) * C * C;
  for (int e = threadIdx.x; e < C * kSlice; e += kThreads) {
    const int row = e / kSlice, col = e % kSlice;
    const std::int64_t at = base + static_cast<std::int64_t>(row) * dkw + c0 + col;
    sq[e] = q[at];
    sk[e] = k[at];
    sg[e] = g[at];
  }
  for (int e = threadIdx.x; e < C * C; e += kThreads) {
    sda[e] = da[square + e];
    sdp[e] = dp[square + e];
  }
  __syncthreads();
  for (int i = warp; i < C; i += kThreads / 32) {
    const float qi = sq[i * kSlice + lane], ki = sk[i * kSlice + lane], gi = sg[i * kSlice + lane];
    float dq_i = 0.f, row_a = 0.f, column = 0.f;
    for (int j = 0; j <= i; ++j) {
      const float kje = sk[j * kSlice + lane] * ExpNonPositive(gi - sg[j * kSlice + lane]);
      dq_i += sdp[i * C + j] * kje;
      if (j < i) row_a += sda[i * C + j] * kje;
    }
    for (int m = i; m < C; ++m) {
      const float e = ExpNonPositive(sg[m * kSlice + lane] - gi);
      float t = sdp[m * C + i] * sq[m * kSlice + lane];
      if (m > i) t += sda[m * C + i] * sk[m * kSlice + lane];
      column += t * e;
    }
    const std::int64_t at = base + static_cast<std::int64_t>(i) * dkw + c0 + lane;
    dq[at] = dq_i;
    dk[at] = row_a + column;
    dg[at] = qi * dq_i + ki * row_a - ki * column;
  }
}

// One block per (batch * head, 32-column slice of dv); thread (r, j) holds
// column j of the slice, rows 32r .. 32r + 31 of the state, in registers.
template <int DK>
__global__ void __launch_bounds__(DK) RecurrentKernel(const float* __restrict__ q, const float* __restrict__ k,
                                                      const float* __restrict__ v, const float* __restrict__ g,
                                                      const float* __restrict__ beta, const float* initial_state,
                                                      float* __restrict__ o, float* final_state, int steps,
                                                      int heads, int dv) {
  constexpr int kGroups = DK / 32;
  const int bh = blockIdx.y, b = bh / heads, h = bh % heads, v0 = blockIdx.x * 32;
  const int j = threadIdx.x % 32, r = threadIdx.x / 32;
  __shared__ float sk[DK], sq[DK], sdecay[DK];
  __shared__ float partial[kGroups][32];
  const std::int64_t state_base = static_cast<std::int64_t>(bh) * DK * dv + v0 + j;
  float s[32];
#pragma unroll
  for (int x = 0; x < 32; ++x)
    s[x] = initial_state ? initial_state[state_base + static_cast<std::int64_t>(r * 32 + x) * dv] : 0.f;
  for (int t = 0; t < steps; ++t) {
    const std::int64_t token = (static_cast<std::int64_t>(b) * steps + t) * heads + h;
    for (int i = threadIdx.x; i < DK; i += DK) {
      sk[i] = k[token * DK + i];
      sq[i] = q[token * DK + i];
      sdecay[i] = __expf(g[token * DK + i]);
    }
    __syncthreads();
    float ks = 0.f;  // (S^T k)_j over this thread's rows, after the decay
#pragma unroll
    for (int x = 0; x < 32; ++x) {
      s[x] *= sdecay[r * 32 + x];
      ks += s[x] * sk[r * 32 + x];
    }
    partial[r][j] = ks;
    __syncthreads();
    ks = 0.f;
#pragma unroll
    for (int y = 0; y < kGroups; ++y) ks += partial[y][j];
    const float update = beta[token] * (v[token * dv + v0 + j] - ks);
    float out = 0.f;
#pragma unroll
    for (int x = 0; x < 32; ++x) {
      s[x] += sk[r * 32 + x] * update;
      out += s[x] * sq[r * 32 + x];
    }
    __syncthreads();  // every thread has read `partial` before it is reused
    partial[r][j] = out;
    __syncthreads();
    if (r == 0) {
      out = 0.f;
#pragma unroll
      for (int y = 0; y < kGroups; ++y) out += partial[y][j];
      o[token * dv + v0 + j] = out;
    }
    __syncthreads();
  }
#pragma unroll
  for (int x = 0; x < 32; ++x) final_state[state_base + static_cast<std::int64_t>(r * 32 + x) * dv] = s[x];
}

// One block per (batch * head, 32-column slice of dv), DK threads; thread
// (r, j) holds column j, rows 32r .. 32r + 31 of the state in registers, as
// RecurrentKernel does. Per chunk: b S reduced over the state's rows (each
// thread's 32, then across the DK / 32 row groups in shared memory), then
// the state update as c^T x over the chunk's rows.
template <int DK, int C>
__global__ void __launch_bounds__(DK) ScanKernel(const float* __restrict__ a, const float* __restrict__ b,
                                                 const float* __restrict__ c, const float* __restrict__ d,
                                                 const float* __restrict__ e, const float* __restrict__ initial,
                                                 float* __restrict__ x, float* __restrict__ starts,
                                                 float* __restrict__ final_state, int chunks, int dv, bool reverse,
                                                 float sign_bs, float sign_cx) {
  constexpr int kGroups = DK / 32;
  extern __shared__ float smem[];
  float* sb = smem;                  // [C][DK]
  float* sc = sb + C * DK;           // [C][DK]
  float* partial = sc + C * DK;      // [kGroups][C][32]
  float* sx = partial + kGroups * C * 32;  // [C][32]
  float* sd = sx + C * 32;           // [DK]
  const int bh = blockIdx.y, v0 = blockIdx.x * 32, j = threadIdx.x % 32, r = threadIdx.x / 32;
  const std::int64_t state_base = static_cast<std::int64_t>(bh) * DK * dv + v0 + j;
  float s[32];
#pragma unroll
  for (int y = 0; y < 32; ++y)
    s[y] = initial ? initial[state_base + static_cast<std::int64_t>(r * 32 + y) * dv] : 0.f;
  for (int step = 0; step < chunks; ++step) {
    const std::int64_t chunk = static_cast<std::int64_t>(bh) * chunks + (reverse ? chunks - 1 - step : step);
    __syncthreads();  // the previous chunk is done with the shared tiles
    for (int i = threadIdx.x; i < C * DK; i += DK) {
      sb[i] = b[chunk * C * DK + i];
      sc[i] = c[chunk * C * DK + i];
    }
    sd[threadIdx.x] = d[chunk * DK + threadIdx.x];
    const std::int64_t square = chunk * DK * dv + v0 + j;  // [dk, dv] tensors of this chunk
#pragma unroll
    for (int y = 0; y < 32; ++y) starts[square + static_cast<std::int64_t>(r * 32 + y) * dv] = s[y];
    __syncthreads();
#pragma unroll 1
    for (int row = 0; row < C; ++row) {  // this thread's rows of (b S)[row][j]
      float acc = 0.f;
#pragma unroll
      for (int y = 0; y < 32; ++y) acc += sb[row * DK + r * 32 + y] * s[y];
      partial[(r * C + row) * 32 + j] = acc;
    }
    __syncthreads();
    const std::int64_t rows = chunk * C * dv + v0 + j;  // [C, dv] tensors of this chunk
    for (int row = r; row < C; row += kGroups) {
      float bs = 0.f;
#pragma unroll
      for (int g = 0; g < kGroups; ++g) bs += partial[(g * C + row) * 32 + j];
      const float value = a[rows + static_cast<std::int64_t>(row) * dv] + sign_bs * bs;
      sx[row * 32 + j] = value;
      x[rows + static_cast<std::int64_t>(row) * dv] = value;
    }
    __syncthreads();
    // Rows outer, the thread's 32 state rows inner and unrolled: s and cx
    // stay in registers only if every index is a constant.
    float cx[32];
#pragma unroll
    for (int y = 0; y < 32; ++y) cx[y] = 0.f;
#pragma unroll 1
    for (int row = 0; row < C; ++row) {
      const float xv = sx[row * 32 + j];
#pragma unroll
      for (int y = 0; y < 32; ++y) cx[y] += sc[row * DK + r * 32 + y] * xv;
    }
#pragma unroll
    for (int y = 0; y < 32; ++y) {
      const int k = r * 32 + y;
      s[y] = sd[k] * s[y] + sign_cx * cx[y];
      if (e) s[y] += e[square + static_cast<std::int64_t>(k) * dv];
    }
  }
#pragma unroll
  for (int y = 0; y < 32; ++y) final_state[state_base + static_cast<std::int64_t>(r * 32 + y) * dv] = s[y];
}

// The scan on tensor cores: one block per (batch * head, 64 columns of dv),
// four warps of 16 columns each. Everything is held transposed, so the
// state is the left operand of both products and never leaves registers:
// warp w keeps S^T over its 16 columns and all DK rows as DK / 8
// accumulator tiles (TF32 m16n8k8, cuda_mma.cuh), and per chunk computes
//   X^T = A^T + sign_bs S^T B^T          (K = DK: no reduction across warps)
//   S^T <- S^T Diag(d) + E^T + sign_cx X^T C
// where X^T, an accumulator, is the second product's A operand as it
// stands. The chunk's B, C, A tiles and d are copied into shared memory by
// cp.async one chunk ahead (two stages).
constexpr int kTcWarps = 4;
constexpr int kTcColumns = 16 * kTcWarps;  // dv columns per block
constexpr int kTcAStride = kTcColumns + 4;

// One stage's shared tiles, in floats. The row strides make each warp's
// fragment reads conflict-free: B is read as float2 at (row g, column 2t),
// stride = 8 (mod 32); C and A at (row 2t, column g), stride = 4 (mod 32).
// Every offset is a multiple of 4 floats (16-byte copies).
template <int DK, int C>
struct TcScanStage {
  static constexpr int kBStride = DK + 8, kCStride = DK + 4;
  static constexpr int kB = 0, kC = kB + C * kBStride, kA = kC + C * kCStride, kD = kA + C * kTcAStride;
  static constexpr int kFloats = kD + DK;
  static constexpr int kBytes = 2 * kFloats * static_cast<int>(sizeof(float));
};

// out[k * gridDim.x] = sum over the block's 64 columns v of S[k][v] w[k][v],
// for S held as ScanTensorCoreKernel holds it (st, positions `at`): the
// thread's two columns, then the warp's 16 (lanes of equal t), then the
// four warps' through shared memory, in a fixed order.
__device__ __forceinline__ float AsFloat(float x) { return x; }
__device__ __forceinline__ float AsFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void StoreAs(float* at, float x) { *at = x; }
__device__ __forceinline__ void StoreAs(__nv_bfloat16* at, float x) { *at = __float2bfloat16_rn(x); }

template <int DK, typename S, typename At>
__device__ __forceinline__ void RowDots(const float (&st)[DK / 8][4], const S* __restrict__ w, At at,
                                        float* __restrict__ out) {
  __shared__ float warp_sums[kTcWarps][DK];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int kt = 0; kt < DK / 8; ++kt)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float sum = st[kt][j] * AsFloat(w[at(kt, j)]) + st[kt][j + 2] * AsFloat(w[at(kt, j + 2)]);
#pragma unroll
      for (int lanes = 4; lanes < 32; lanes *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, lanes);
      if (lane < 4) warp_sums[warp][8 * kt + 2 * lane + j] = sum;
    }
  __syncthreads();
  for (int k = threadIdx.x; k < DK; k += blockDim.x) {
    float sum = 0.f;
#pragma unroll
    for (int w8 = 0; w8 < kTcWarps; ++w8) sum += warp_sums[w8][k];
    out[static_cast<std::int64_t>(k) * gridDim.x] = sum;
  }
}

// S: the type `starts` and `dot_with` are stored in (float or __nv_bfloat16).
template <int DK, int C, typename S>
__global__ void __launch_bounds__(32 * kTcWarps) ScanTensorCoreKernel(
    const float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ c,
    const float* __restrict__ d, const float* __restrict__ e, const float* __restrict__ initial,
    float* __restrict__ x, S* __restrict__ starts, float* __restrict__ final_state, int chunks, int dv,
    bool reverse, float sign_bs, float sign_cx, const S* __restrict__ dot_with, float* __restrict__ dot_out) {
  using Stage = TcScanStage<DK, C>;
  constexpr int KT = DK / 8, CT = C / 8;
  extern __shared__ __align__(16) float smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int bh = blockIdx.y, v0 = blockIdx.x * kTcColumns, vl = warp * 16 + g;  // columns vl, vl + 8 of the block
  auto chunk_at = [&](int step) {
    return static_cast<std::int64_t>(bh) * chunks + (reverse ? chunks - 1 - step : step);
  };
  auto load = [&](int step) {
    float* s = smem + (step % 2) * Stage::kFloats;
    const std::int64_t chunk = chunk_at(step);
    const float* bs = b + chunk * C * DK;
    const float* cs = c + chunk * C * DK;
    for (int i = threadIdx.x; i < C * DK / 4; i += blockDim.x) {
      const int row = i / (DK / 4), col = i % (DK / 4) * 4;
      CopyAsync16(s + Stage::kB + row * Stage::kBStride + col, bs + row * DK + col);
      CopyAsync16(s + Stage::kC + row * Stage::kCStride + col, cs + row * DK + col);
    }
    const float* as = a + chunk * C * dv + v0;
    for (int i = threadIdx.x; i < C * kTcColumns / 4; i += blockDim.x) {
      const int row = i / (kTcColumns / 4), col = i % (kTcColumns / 4) * 4;
      CopyAsync16(s + Stage::kA + row * kTcAStride + col, as + static_cast<std::int64_t>(row) * dv + col);
    }
    for (int i = threadIdx.x; i < DK / 4; i += blockDim.x) CopyAsync16(s + Stage::kD + 4 * i, d + chunk * DK + 4 * i);
    CopyAsyncCommit();
  };
  // st[kt][i] is S[k][v] at k = 8 kt + 2t + (i & 1), v = v0 + vl + 8 (i >> 1):
  // the accumulator layout of S^T's tile kt.
  auto at = [&](int kt, int i) {
    return static_cast<std::int64_t>(8 * kt + 2 * t + (i & 1)) * dv + v0 + vl + 8 * (i >> 1);
  };
  const std::int64_t state = static_cast<std::int64_t>(bh) * DK * dv;
  float st[KT][4];
#pragma unroll
  for (int kt = 0; kt < KT; ++kt)
#pragma unroll
    for (int i = 0; i < 4; ++i) st[kt][i] = initial ? initial[state + at(kt, i)] : 0.f;
  if (chunks > 0) load(0);
  for (int step = 0; step < chunks; ++step) {
    if (step + 1 < chunks) {
      load(step + 1);
      CopyAsyncWait<1>();
    } else {
      CopyAsyncWait<0>();
    }
    __syncthreads();
    const float* s = smem + (step % 2) * Stage::kFloats;
    const std::int64_t chunk = chunk_at(step), square = chunk * DK * dv, rows = chunk * C * dv;
#pragma unroll
    for (int kt = 0; kt < KT; ++kt)
#pragma unroll
      for (int i = 0; i < 4; ++i) StoreAs(starts + square + at(kt, i), st[kt][i]);
    if (dot_with) RowDots<DK>(st, dot_with + square, at, dot_out + (chunk * DK) * gridDim.x + blockIdx.x);
    // X^T = A^T + sign_bs S^T B^T; xt[ct][i] is X[c][v] at c = 8 ct + 2t + (i & 1).
    float xt[CT][4];
#pragma unroll
    for (int ct = 0; ct < CT; ++ct)
#pragma unroll
      for (int i = 0; i < 4; ++i) xt[ct][i] = 0.f;
#pragma unroll
    for (int kt = 0; kt < KT; ++kt) {
      std::uint32_t frag[4];
      AccumulatorAsA(st[kt], 1.f, frag);
#pragma unroll
      for (int ct = 0; ct < CT; ++ct) {
        const float2 bv =
            *reinterpret_cast<const float2*>(s + Stage::kB + (8 * ct + g) * Stage::kBStride + 8 * kt + 2 * t);
        MmaTf32(xt[ct], frag, ToTf32(bv.x), ToTf32(bv.y));
      }
    }
#pragma unroll
    for (int ct = 0; ct < CT; ++ct)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = 8 * ct + 2 * t + (i & 1), col = vl + 8 * (i >> 1);
        xt[ct][i] = s[Stage::kA + row * kTcAStride + col] + sign_bs * xt[ct][i];
        x[rows + static_cast<std::int64_t>(row) * dv + v0 + col] = xt[ct][i];
      }
    // S^T <- S^T Diag(d) + E^T + sign_cx X^T C
#pragma unroll
    for (int kt = 0; kt < KT; ++kt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        st[kt][i] *= s[Stage::kD + 8 * kt + 2 * t + (i & 1)];
        if (e) st[kt][i] += e[square + at(kt, i)];
      }
#pragma unroll
    for (int ct = 0; ct < CT; ++ct) {
      std::uint32_t frag[4];
      AccumulatorAsA(xt[ct], sign_cx, frag);
#pragma unroll
      for (int kt = 0; kt < KT; ++kt) {
        const float* column = s + Stage::kC + (8 * ct + 2 * t) * Stage::kCStride + 8 * kt + g;
        MmaTf32(st[kt], frag, ToTf32(column[0]), ToTf32(column[Stage::kCStride]));
      }
    }
    __syncthreads();  // every warp is done with this stage before it is refilled
  }
#pragma unroll
  for (int kt = 0; kt < KT; ++kt)
#pragma unroll
    for (int i = 0; i < 4; ++i) final_state[state + at(kt, i)] = st[kt][i];
}

template <int DK, int C>
cudaError_t LaunchScan(const KdaScan& s, bool reverse, float sign_bs, float sign_cx, const float* a, const float* b,
                       const float* c, const float* d, const float* e, const float* initial, float* x,
                       float* starts, float* final_state, cudaStream_t stream) {
  const int bytes = static_cast<int>(sizeof(float)) * (2 * C * DK + (DK / 32) * C * 32 + C * 32 + DK);
  cudaError_t err = cudaFuncSetAttribute(ScanKernel<DK, C>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(s.dv / 32), static_cast<unsigned>(s.batch_heads));
  ScanKernel<DK, C><<<grid, DK, bytes, stream>>>(a, b, c, d, e, initial, x, starts, final_state, s.chunks, s.dv,
                                                 reverse, sign_bs, sign_cx);
  return cudaGetLastError();
}

template <int DK, int C, typename S>
cudaError_t LaunchScanTensorCores(const KdaScan& s, bool reverse, float sign_bs, float sign_cx, const float* a,
                                  const float* b, const float* c, const float* d, const float* e,
                                  const float* initial, float* x, void* starts, float* final_state,
                                  const void* dot_with, float* dot_out, cudaStream_t stream) {
  constexpr int bytes = TcScanStage<DK, C>::kBytes;
  cudaError_t err =
      cudaFuncSetAttribute(ScanTensorCoreKernel<DK, C, S>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(s.dv / kTcColumns), static_cast<unsigned>(s.batch_heads));
  ScanTensorCoreKernel<DK, C, S><<<grid, 32 * kTcWarps, bytes, stream>>>(
      a, b, c, d, e, initial, x, static_cast<S*>(starts), final_state, s.chunks, s.dv, reverse, sign_bs, sign_cx,
      static_cast<const S*>(dot_with), dot_out);
  return cudaGetLastError();
}

// f(DK, C) with the shape's dk and chunk as std::integral_constant.
template <typename F>
cudaError_t WithScanShape(const KdaScan& s, F&& f) {
  auto for_chunk = [&](auto dk) -> cudaError_t {
    switch (s.chunk) {
      case 16: return f(dk, std::integral_constant<int, 16>{});
      case 32: return f(dk, std::integral_constant<int, 32>{});
      default: return f(dk, std::integral_constant<int, 64>{});
    }
  };
  return s.dk == 64 ? for_chunk(std::integral_constant<int, 64>{}) : for_chunk(std::integral_constant<int, 128>{});
}

template <int C>
cudaError_t LaunchIntraForward(const KdaChunks& s, const float* q, const float* k, const float* g, float* a,
                               float* p, cudaStream_t stream) {
  IntraForwardKernel<C><<<static_cast<unsigned>(s.chunks), kThreads, 0, stream>>>(q, k, g, a, p, s.dk);
  return cudaGetLastError();
}

template <int C>
cudaError_t LaunchIntraBackward(const KdaChunks& s, const float* q, const float* k, const float* g,
                                const float* da, const float* dp, float* dq, float* dk, float* dg,
                                cudaStream_t stream) {
  const int bytes = static_cast<int>(sizeof(float)) * (3 * C * kSlice + 2 * C * C);
  // Over 48 KB (C = 64: 56 KB) a kernel must opt in to dynamic shared memory.
  cudaError_t err = cudaFuncSetAttribute(IntraBackwardKernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(s.chunks), static_cast<unsigned>(s.dk / kSlice));
  IntraBackwardKernel<C><<<grid, kThreads, bytes, stream>>>(q, k, g, da, dp, dq, dk, dg, s.dk);
  return cudaGetLastError();
}

template <int DK>
cudaError_t LaunchRecurrent(const KdaTokens& s, const float* q, const float* k, const float* v, const float* g,
                            const float* beta, const float* s0, float* o, float* s1, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(s.dv / 32), static_cast<unsigned>(s.batch * s.heads));
  RecurrentKernel<DK><<<grid, DK, 0, stream>>>(q, k, v, g, beta, s0, o, s1, static_cast<int>(s.steps), s.heads,
                                               s.dv);
  return cudaGetLastError();
}

}  // namespace

bool KdaIntraSupports(int chunk, int dk) {
  return (chunk == 16 || chunk == 32 || chunk == 64) && dk > 0 && dk % kSlice == 0;
}

cudaError_t KdaIntraForward(const KdaChunks& shape, const float* q, const float* k, const float* g_cum, float* a,
                            float* p, cudaStream_t stream) {
  if (!KdaIntraSupports(shape.chunk, shape.dk)) return cudaErrorInvalidValue;
  if (shape.chunks == 0) return cudaSuccess;
  switch (shape.chunk) {
    case 16: return LaunchIntraForward<16>(shape, q, k, g_cum, a, p, stream);
    case 32: return LaunchIntraForward<32>(shape, q, k, g_cum, a, p, stream);
    default: return LaunchIntraForward<64>(shape, q, k, g_cum, a, p, stream);
  }
}

cudaError_t KdaIntraBackward(const KdaChunks& shape, const float* q, const float* k, const float* g_cum,
                             const float* da, const float* dp, float* dq, float* dk, float* dg_cum,
                             cudaStream_t stream) {
  if (!KdaIntraSupports(shape.chunk, shape.dk)) return cudaErrorInvalidValue;
  if (shape.chunks == 0) return cudaSuccess;
  switch (shape.chunk) {
    case 16: return LaunchIntraBackward<16>(shape, q, k, g_cum, da, dp, dq, dk, dg_cum, stream);
    case 32: return LaunchIntraBackward<32>(shape, q, k, g_cum, da, dp, dq, dk, dg_cum, stream);
    default: return LaunchIntraBackward<64>(shape, q, k, g_cum, da, dp, dq, dk, dg_cum, stream);
  }
}

bool KdaScanSupports(int chunk, int dk, int dv) {
  return (chunk == 16 || chunk == 32 || chunk == 64) && (dk == 64 || dk == 128) && dv > 0 && dv % 32 == 0;
}

bool KdaScanTensorCoresTake(int chunk, int dk, int dv, const float* a, const float* b, const float* c,
                            const float* d) {
  return KdaScanSupports(chunk, dk, dv) && dv % kTcColumns == 0 && elementwise::Aligned({a, b, c, d});
}

cudaError_t KdaChunkScan(const KdaScan& shape, bool reverse, float sign_bs, float sign_cx, const float* a,
                         const float* b, const float* c, const float* d, const float* e, const float* initial,
                         float* x, void* starts, float* final_state, cudaStream_t stream, const void* dot_with,
                         float* dot_out) {
  if (!KdaScanSupports(shape.chunk, shape.dk, shape.dv)) return cudaErrorInvalidValue;
  if ((dot_with != nullptr) != (dot_out != nullptr) || ((dot_with || shape.states_bf16) && !shape.tensor_cores))
    return cudaErrorInvalidValue;
  if (shape.tensor_cores && !KdaScanTensorCoresTake(shape.chunk, shape.dk, shape.dv, a, b, c, d))
    return cudaErrorInvalidValue;
  if (shape.batch_heads == 0) return cudaSuccess;
  return WithScanShape(shape, [&](auto dk, auto chunk) {
    constexpr int DK = decltype(dk)::value, C = decltype(chunk)::value;
    if (!shape.tensor_cores)
      return LaunchScan<DK, C>(shape, reverse, sign_bs, sign_cx, a, b, c, d, e, initial, x,
                               static_cast<float*>(starts), final_state, stream);
    if (shape.states_bf16)
      return LaunchScanTensorCores<DK, C, __nv_bfloat16>(shape, reverse, sign_bs, sign_cx, a, b, c, d, e, initial, x,
                                                         starts, final_state, dot_with, dot_out, stream);
    return LaunchScanTensorCores<DK, C, float>(shape, reverse, sign_bs, sign_cx, a, b, c, d, e, initial, x, starts,
                                               final_state, dot_with, dot_out, stream);
  });
}

bool KdaRecurrentSupports(int dk, int dv) { return (dk == 64 || dk == 128) && dv > 0 && dv % 32 == 0; }

cudaError_t KdaRecurrentForward(const KdaTokens& shape, const float* q, const float* k, const float* v,
                                const float* g, const float* beta, const float* initial_state, float* o,
                                float* final_state, cudaStream_t stream) {
  if (!KdaRecurrentSupports(shape.dk, shape.dv)) return cudaErrorInvalidValue;
  if (shape.batch * shape.heads == 0) return cudaSuccess;
  if (shape.dk == 64) return LaunchRecurrent<64>(shape, q, k, v, g, beta, initial_state, o, final_state, stream);
  return LaunchRecurrent<128>(shape, q, k, v, g, beta, initial_state, o, final_state, stream);
}

}  // namespace kp::runtime::cuda
