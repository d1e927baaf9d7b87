// Kernels of kda_prep_cuda.h.
//
// Short convolution: one warp per (batch, token, head) row, lane l on the
// head's channels l, l + 32, ...:
//   a = sum_j w[c][j] x[t - (K-1) + j][c],  s = silu(a),  r = 1 / sqrt(|s|^2 + eps)
//   out = scale s r  (or scale s without the norm)
// backward, per row: ds = scale (r dout - s r^3 (s . dout)),  da = ds silu'(a)
// into a token-major scratch; then one thread per (token tile, channel):
//   dx[t][c] = sum_j w[c][j] da[t + (K-1) - j][c],  dw[c][j] += da[t][c] x[t - (K-1) + j][c].
//
// Gate: one thread per (batch, head, chunk, channel), down the chunk's rows
// (the cumulative sum forward, the reverse cumulative sum backward).
#include "runtime/kernels/kda_prep_cuda.h"

#include "runtime/kernels/cuda_elementwise.cuh"
#include "runtime/kernels/cuda_rows.cuh"

namespace kp::runtime::cuda {
namespace {

using namespace rowwise;  // NOLINT: the convolution's kernels are row kernels

constexpr int kMaxPerLane = 8;     // 256 channels per head
constexpr int kMaxKernel = 8;      // the short convolution's width
constexpr int kTileTokens = 64;    // tokens per thread in the convolution's backward
constexpr int kChannelBlock = 128;

__device__ __forceinline__ float Sigmoid(float a) { return 1.f / (1.f + expf(-a)); }

// torch's softplus (beta 1, threshold 20) and its derivative.
__device__ __forceinline__ float Softplus(float z) { return z > 20.f ? z : log1pf(expf(z)); }
__device__ __forceinline__ float SoftplusGrad(float z) { return z > 20.f ? 1.f : Sigmoid(z); }

__host__ __device__ __forceinline__ std::int64_t Chunks(const KdaPrepShape& s) { return (s.tokens + s.chunk - 1) / s.chunk; }

// Where token t of (batch b, head h), channel c, lives in the chunked layout.
__device__ __forceinline__ std::int64_t ChunkedIndex(const KdaPrepShape& s, std::int64_t b, int h, std::int64_t t,
                                                     int c, std::int64_t padded) {
  return ((b * s.heads + h) * padded + t) * s.dim + c;
}

// The convolution's width: K when the kernel is built for one (the Kimi
// models' 4), else the shape's. A fixed width unrolls every tap loop, so a
// lane's loads of all taps issue at once instead of one latency each.
template <int K>
__device__ __forceinline__ int Taps(const KdaPrepShape& s) {
  return K > 0 ? K : s.kernel;
}

// The convolution's pre-activations at (b, t) for channels [hc, hc + P) of x
// [B, T, HD]; w [HD, taps] fp32.
template <int K, int P, typename T>
__device__ __forceinline__ void ConvAt(const KdaPrepShape& s, const T* __restrict__ x, const float* __restrict__ w,
                                       std::int64_t b, std::int64_t t, int hc, float* a) {
  const int hd = s.heads * s.dim, taps = Taps<K>(s);
#pragma unroll
  for (int e = 0; e < P; ++e) a[e] = 0.f;
#pragma unroll
  for (int j = 0; j < (K > 0 ? K : kMaxKernel); ++j) {
    if (j >= taps) break;
    const std::int64_t src = t - (taps - 1) + j;
    if (src < 0) continue;
    float xs[P];
    LoadN<P>(x, (b * s.tokens + src) * hd + hc, xs);
#pragma unroll
    for (int e = 0; e < P; ++e) a[e] += w[(hc + e) * taps + j] * xs[e];
  }
}

// Lane l of a row kernel holds channels l P + 32 P i + e of its head, for
// stripes i < dim / (32 P) and e < P: at most kMaxPerLane in all.
template <int P>
__device__ __forceinline__ int Stripes(const KdaPrepShape& s) {
  return s.dim / (32 * P);
}

template <typename T, int K, int P>
__global__ void __launch_bounds__(kWarps * 32)
    ConvForwardKernel(KdaPrepShape s, const T* __restrict__ x, const float* __restrict__ w, bool l2, float scale,
                      float eps, float* __restrict__ out) {
  constexpr int kStripes = kMaxPerLane / P;
  const std::int64_t padded = Chunks(s) * s.chunk;
  const std::int64_t row = Row();
  if (row >= s.batch * padded * s.heads) return;
  const int h = static_cast<int>(row % s.heads);
  const std::int64_t t = (row / s.heads) % padded, b = row / s.heads / padded;
  const int lane = threadIdx.x % 32;
  float act[kMaxPerLane];
  float squares = 0.f;
#pragma unroll
  for (int i = 0; i < kStripes; ++i) {
    float* a = act + i * P;
#pragma unroll
    for (int e = 0; e < P; ++e) a[e] = 0.f;
    if (i < Stripes<P>(s) && t < s.tokens) {
      ConvAt<K, P>(s, x, w, b, t, h * s.dim + lane * P + 32 * P * i, a);
#pragma unroll
      for (int e = 0; e < P; ++e) {
        a[e] *= Sigmoid(a[e]);
        squares += a[e] * a[e];
      }
    }
  }
  const float r = (l2 ? rsqrtf(WarpSum(squares) + eps) : 1.f) * scale;
#pragma unroll
  for (int i = 0; i < kStripes; ++i) {
    if (i >= Stripes<P>(s)) break;
    float y[P];
#pragma unroll
    for (int e = 0; e < P; ++e) y[e] = act[i * P + e] * r;
    StoreN<P>(out, ChunkedIndex(s, b, h, t, lane * P + 32 * P * i, padded), y);
  }
}

template <typename T, int K, int P>
__global__ void __launch_bounds__(kWarps * 32)
    ConvActGradKernel(KdaPrepShape s, const T* __restrict__ x, const float* __restrict__ w, bool l2, float scale,
                      float eps, const float* __restrict__ dout, float* __restrict__ da) {
  constexpr int kStripes = kMaxPerLane / P;
  const std::int64_t padded = Chunks(s) * s.chunk;
  const std::int64_t row = Row();
  if (row >= s.batch * s.tokens * s.heads) return;
  const int h = static_cast<int>(row % s.heads);
  const std::int64_t t = (row / s.heads) % s.tokens, b = row / s.heads / s.tokens;
  const int lane = threadIdx.x % 32, hd = s.heads * s.dim;
  float pre[kMaxPerLane], act[kMaxPerLane], grad[kMaxPerLane];
  float squares = 0.f, dot = 0.f;
#pragma unroll
  for (int i = 0; i < kStripes; ++i) {
    const int c = lane * P + 32 * P * i;
#pragma unroll
    for (int e = 0; e < P; ++e) pre[i * P + e] = act[i * P + e] = grad[i * P + e] = 0.f;
    if (i < Stripes<P>(s)) {
      ConvAt<K, P>(s, x, w, b, t, h * s.dim + c, pre + i * P);
      LoadN<P>(dout, ChunkedIndex(s, b, h, t, c, padded), grad + i * P);
#pragma unroll
      for (int e = 0; e < P; ++e) {
        const int at = i * P + e;
        act[at] = pre[at] * Sigmoid(pre[at]);
        squares += act[at] * act[at];
        dot += act[at] * grad[at];
      }
    }
  }
  float r = 1.f, r3_dot = 0.f;
  if (l2) {
    r = rsqrtf(WarpSum(squares) + eps);
    r3_dot = r * r * r * WarpSum(dot);
  }
#pragma unroll
  for (int i = 0; i < kStripes; ++i) {
    if (i >= Stripes<P>(s)) break;
    float d[P];
#pragma unroll
    for (int e = 0; e < P; ++e) {
      const int at = i * P + e;
      const float ds = scale * (r * grad[at] - act[at] * r3_dot);
      const float sig = Sigmoid(pre[at]);
      d[e] = ds * sig * (1.f + pre[at] * (1.f - sig));
    }
    StoreN<P>(da, (b * s.tokens + t) * hd + h * s.dim + lane * P + 32 * P * i, d);
  }
}

// One thread per (token tile, P consecutive channels).
template <typename T, int K, int P>
__global__ void ConvInputGradKernel(KdaPrepShape s, const T* __restrict__ x, const float* __restrict__ w,
                                    const float* __restrict__ da, T* __restrict__ dx, float* __restrict__ dw_partial) {
  const int hd = s.heads * s.dim, taps = Taps<K>(s);
  const int hc = (blockIdx.x * blockDim.x + threadIdx.x) * P;
  if (hc >= hd) return;
  const std::int64_t tiles_per_batch = (s.tokens + kTileTokens - 1) / kTileTokens;
  const std::int64_t tile = blockIdx.y, b = tile / tiles_per_batch;
  const std::int64_t first = (tile % tiles_per_batch) * kTileTokens;
  const std::int64_t last = first + kTileTokens < s.tokens ? first + kTileTokens : s.tokens;
  constexpr int kTaps = K > 0 ? K : kMaxKernel;
  float dw[kTaps][P] = {};
#pragma unroll 2
  for (std::int64_t t = first; t < last; ++t) {
    float g[P], dxt[P] = {};
    LoadN<P>(da, (b * s.tokens + t) * hd + hc, g);
#pragma unroll
    for (int j = 0; j < kTaps; ++j) {
      if (j >= taps) break;
      const std::int64_t src = t - (taps - 1) + j, dst = t + (taps - 1) - j;
      if (src >= 0) {
        float xs[P];
        LoadN<P>(x, (b * s.tokens + src) * hd + hc, xs);
#pragma unroll
        for (int e = 0; e < P; ++e) dw[j][e] += g[e] * xs[e];
      }
      if (dst < s.tokens) {
        float later[P];
        LoadN<P>(da, (b * s.tokens + dst) * hd + hc, later);
#pragma unroll
        for (int e = 0; e < P; ++e) dxt[e] += w[(hc + e) * taps + j] * later[e];
      }
    }
    StoreN<P>(dx, (b * s.tokens + t) * hd + hc, dxt);
  }
#pragma unroll
  for (int j = 0; j < kTaps; ++j)
    if (j < taps)
#pragma unroll
      for (int e = 0; e < P; ++e) dw_partial[(tile * hd + hc + e) * taps + j] = dw[j][e];
}

// The gate kernels' thread: one per (batch, head, chunk, channel),
// blockIdx.x = (b * heads + h) * n + chunk, threadIdx.x = channel.
struct GateThread {
  std::int64_t n, chunk, b;
  int h, c, hd, hc;
  float decay;  // -exp(a_log[h])

  __device__ GateThread(const KdaPrepShape& s, const float* a_log)
      : n(Chunks(s)), chunk(blockIdx.x % n), b(blockIdx.x / n / s.heads),
        h(static_cast<int>(blockIdx.x / n % s.heads)), c(static_cast<int>(threadIdx.x)), hd(s.heads * s.dim),
        hc(h * s.dim + c), decay(-expf(a_log[h])) {}

  __device__ std::int64_t Token(const KdaPrepShape& s, int i) const { return chunk * s.chunk + i; }
  __device__ std::int64_t RowAt(const KdaPrepShape& s, std::int64_t t) const { return (b * s.tokens + t) * hd + hc; }
  __device__ std::int64_t ChunkedAt(const KdaPrepShape& s, std::int64_t t) const {
    return ChunkedIndex(s, b, h, t, c, n * s.chunk);
  }
};

template <typename T>
__global__ void GateForwardKernel(KdaPrepShape s, const T* __restrict__ f, const float* __restrict__ a_log,
                                  const float* __restrict__ dt_bias, float* __restrict__ cum) {
  const GateThread th(s, a_log);
  const float bias = dt_bias[th.hc];
  float acc = 0.f;
  for (int i = 0; i < s.chunk; ++i) {
    const std::int64_t t = th.Token(s, i);
    if (t < s.tokens) acc += th.decay * Softplus(Load(f, th.RowAt(s, t)) + bias);
    cum[th.ChunkedAt(s, t)] = acc;
  }
}

template <typename T>
__global__ void GateBackwardKernel(KdaPrepShape s, const T* __restrict__ f, const float* __restrict__ a_log,
                                   const float* __restrict__ dt_bias, const float* __restrict__ dcum,
                                   T* __restrict__ df, float* __restrict__ ddt_partial,
                                   float* __restrict__ dalog_partial) {
  const GateThread th(s, a_log);
  const float bias = dt_bias[th.hc];
  float dg = 0.f, ddt = 0.f, dalog = 0.f;
  for (int i = s.chunk - 1; i >= 0; --i) {
    const std::int64_t t = th.Token(s, i);
    dg += dcum[th.ChunkedAt(s, t)];
    if (t >= s.tokens) continue;
    const std::int64_t at = th.RowAt(s, t);
    const float z = Load(f, at) + bias;
    const float dz = dg * th.decay * SoftplusGrad(z);
    Store(df, at, dz);
    ddt += dz;
    dalog += dg * th.decay * Softplus(z);
  }
  const std::int64_t partial = (th.b * th.n + th.chunk) * th.hd + th.hc;
  ddt_partial[partial] = ddt;
  dalog_partial[partial] = dalog;
}

// One block per chunk, thread c on k-channel c (c < dk) and v-channel c
// (c < dv), down the chunk's rows.
__global__ void ProductsForwardKernel(KdaChunkProducts s, const float* __restrict__ q, const float* __restrict__ k,
                                      const float* __restrict__ v, const float* __restrict__ g,
                                      const float* __restrict__ beta, float* __restrict__ qd, float* __restrict__ kb,
                                      float* __restrict__ ke, float* __restrict__ vb, float* __restrict__ decay) {
  const std::int64_t chunk = blockIdx.x;
  const int c = threadIdx.x;
  const float* b = beta + chunk * s.chunk;
  if (c < s.dk) {
    const std::int64_t at = chunk * s.chunk * s.dk + c;
    const float last = g[at + (s.chunk - 1) * s.dk];
    for (int i = 0; i < s.chunk; ++i) {
      const std::int64_t x = at + i * s.dk;
      const float e = expf(g[x]);
      qd[x] = q[x] * e;
      kb[x] = b[i] * (k[x] * e);
      ke[x] = k[x] * expf(last - g[x]);
    }
    decay[chunk * s.dk + c] = expf(last);
  }
  if (c < s.dv) {
    const std::int64_t at = chunk * s.chunk * s.dv + c;
    for (int i = 0; i < s.chunk; ++i) vb[at + i * s.dv] = b[i] * v[at + i * s.dv];
  }
}

// As the forward, with each row's dbeta summed over the channels through
// shared memory [C][max(dk, dv)] in a fixed order.
__global__ void ProductsBackwardKernel(KdaChunkProducts s, const float* __restrict__ q, const float* __restrict__ k,
                                       const float* __restrict__ v, const float* __restrict__ g,
                                       const float* __restrict__ beta, const float* __restrict__ dqd,
                                       const float* __restrict__ dkb, const float* __restrict__ dke,
                                       const float* __restrict__ dvb, const float* __restrict__ ddecay,
                                       float* __restrict__ dq, float* __restrict__ dk, float* __restrict__ dv,
                                       float* __restrict__ dg, float* __restrict__ dbeta) {
  extern __shared__ float dbeta_parts[];  // [C][width]
  const int width = blockDim.x, c = threadIdx.x;
  const std::int64_t chunk = blockIdx.x;
  const float* b = beta + chunk * s.chunk;
  for (int i = 0; i < s.chunk; ++i) dbeta_parts[i * width + c] = 0.f;
  if (c < s.dk) {
    const std::int64_t at = chunk * s.chunk * s.dk + c;
    const float last = g[at + (s.chunk - 1) * s.dk];
    float dlast = ddecay[chunk * s.dk + c] * expf(last);
    for (int i = 0; i < s.chunk; ++i) {
      const std::int64_t x = at + i * s.dk;
      const float e = expf(g[x]), to_end = expf(last - g[x]);
      const float kd = dkb[x] * k[x] * e, kend = dke[x] * k[x] * to_end;
      dq[x] = dqd[x] * e;
      dk[x] = dkb[x] * b[i] * e + dke[x] * to_end;
      dg[x] = dqd[x] * q[x] * e + b[i] * kd - kend;
      dlast += kend;
      dbeta_parts[i * width + c] = kd;
    }
    dg[at + (s.chunk - 1) * s.dk] += dlast;
  }
  if (c < s.dv) {
    const std::int64_t at = chunk * s.chunk * s.dv + c;
    for (int i = 0; i < s.chunk; ++i) {
      dv[at + i * s.dv] = dvb[at + i * s.dv] * b[i];
      dbeta_parts[i * width + c] += dvb[at + i * s.dv] * v[at + i * s.dv];
    }
  }
  __syncthreads();
  if (c < s.chunk) {
    float sum = 0.f;
    for (int j = 0; j < width; ++j) sum += dbeta_parts[c * width + j];
    dbeta[chunk * s.chunk + c] = sum;
  }
}

unsigned RowBlocks(const KdaPrepShape& s, std::int64_t tokens) { return Blocks(s.batch * tokens * s.heads); }

}  // namespace

bool KdaPrepSupports(int dim, int kernel, int chunk) {
  return dim > 0 && dim % 32 == 0 && dim <= 32 * kMaxPerLane && kernel >= 1 && kernel <= kMaxKernel && chunk >= 1;
}

std::int64_t ShortConvTiles(const KdaPrepShape& s) {
  return s.batch * ((s.tokens + kTileTokens - 1) / kTileTokens);
}

namespace {

// The short convolution's kernels for x of type T: taken four channels a
// lane (one 16-byte fp32 or 8-byte bf16 access) where the dim is a multiple
// of 128 and every buffer 16-byte aligned, and built for width 4 (the Kimi
// models') or any width up to kMaxKernel.
template <typename T, int K, int P>
struct ConvKernels {
  using Input = T;
  static void Forward(const KdaPrepShape& s, const T* x, const float* w, bool l2, float scale, float eps, float* out,
                      cudaStream_t stream) {
    ConvForwardKernel<T, K, P><<<RowBlocks(s, Chunks(s) * s.chunk), kWarps * 32, 0, stream>>>(s, x, w, l2, scale, eps,
                                                                                                out);
  }
  static void Backward(const KdaPrepShape& s, const T* x, const float* w, bool l2, float scale, float eps,
                       const float* dout, float* scratch, T* dx, float* dw_partial, cudaStream_t stream) {
    const int hd = s.heads * s.dim, per_block = kChannelBlock * P;
    const dim3 grid((hd + per_block - 1) / per_block, static_cast<unsigned>(ShortConvTiles(s)));
    ConvActGradKernel<T, K, P><<<RowBlocks(s, s.tokens), kWarps * 32, 0, stream>>>(s, x, w, l2, scale, eps, dout,
                                                                                     scratch);
    ConvInputGradKernel<T, K, P><<<grid, kChannelBlock, 0, stream>>>(s, x, w, scratch, dx, dw_partial);
  }
};

constexpr int kConvPack = 4;

bool ConvPacked(const KdaPrepShape& s, std::initializer_list<const void*> buffers) {
  return s.dim % (32 * kConvPack) == 0 && elementwise::Aligned(buffers);
}

// Calls f with ConvKernels<T, K, P> for the shape's dtype, width and packing.
template <typename T, typename F>
void WithConvKernelsOf(const KdaPrepShape& s, bool packed, F&& f) {
  if (s.kernel == 4 && packed)
    f(ConvKernels<T, 4, kConvPack>{});
  else if (s.kernel == 4)
    f(ConvKernels<T, 4, 1>{});
  else
    f(ConvKernels<T, 0, 1>{});
}
template <typename F>
void WithConvKernels(const KdaPrepShape& s, bool packed, F&& f) {
  if (s.bf16)
    WithConvKernelsOf<__nv_bfloat16>(s, packed, f);
  else
    WithConvKernelsOf<float>(s, packed, f);
}

}  // namespace

cudaError_t ShortConvForward(const KdaPrepShape& s, const void* x, const float* w, bool l2, float scale, float eps,
                             float* out, cudaStream_t stream) {
  if (!KdaPrepSupports(s.dim, s.kernel, s.chunk)) return cudaErrorInvalidValue;
  if (s.batch * s.tokens == 0) return cudaSuccess;
  WithConvKernels(s, ConvPacked(s, {x, w, out}), [&](auto kernels) {
    using T = typename decltype(kernels)::Input;
    kernels.Forward(s, static_cast<const T*>(x), w, l2, scale, eps, out, stream);
  });
  return cudaGetLastError();
}

cudaError_t ShortConvBackward(const KdaPrepShape& s, const void* x, const float* w, bool l2, float scale, float eps,
                              const float* dout, float* scratch, void* dx, float* dw_partial, cudaStream_t stream) {
  if (!KdaPrepSupports(s.dim, s.kernel, s.chunk)) return cudaErrorInvalidValue;
  if (s.batch * s.tokens == 0) return cudaSuccess;
  WithConvKernels(s, ConvPacked(s, {x, w, dout, scratch, dx, dw_partial}), [&](auto kernels) {
    using T = typename decltype(kernels)::Input;
    kernels.Backward(s, static_cast<const T*>(x), w, l2, scale, eps, dout, scratch, static_cast<T*>(dx), dw_partial,
                     stream);
  });
  return cudaGetLastError();
}

cudaError_t GateCumForward(const KdaPrepShape& s, const void* f, const float* a_log, const float* dt_bias, float* cum,
                           cudaStream_t stream) {
  if (!KdaPrepSupports(s.dim, 1, s.chunk)) return cudaErrorInvalidValue;
  if (s.batch * s.tokens == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(s.batch * s.heads * Chunks(s));
  if (s.bf16)
    GateForwardKernel<<<blocks, s.dim, 0, stream>>>(s, static_cast<const __nv_bfloat16*>(f), a_log, dt_bias, cum);
  else
    GateForwardKernel<<<blocks, s.dim, 0, stream>>>(s, static_cast<const float*>(f), a_log, dt_bias, cum);
  return cudaGetLastError();
}

cudaError_t GateCumBackward(const KdaPrepShape& s, const void* f, const float* a_log, const float* dt_bias,
                            const float* dcum, void* df, float* ddt_partial, float* dalog_partial,
                            cudaStream_t stream) {
  if (!KdaPrepSupports(s.dim, 1, s.chunk)) return cudaErrorInvalidValue;
  if (s.batch * s.tokens == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(s.batch * s.heads * Chunks(s));
  if (s.bf16)
    GateBackwardKernel<<<blocks, s.dim, 0, stream>>>(s, static_cast<const __nv_bfloat16*>(f), a_log, dt_bias, dcum,
                                                     static_cast<__nv_bfloat16*>(df), ddt_partial, dalog_partial);
  else
    GateBackwardKernel<<<blocks, s.dim, 0, stream>>>(s, static_cast<const float*>(f), a_log, dt_bias, dcum,
                                                     static_cast<float*>(df), ddt_partial, dalog_partial);
  return cudaGetLastError();
}

bool KdaChunkProductsSupports(int chunk, int dk, int dv) {
  const int width = dk > dv ? dk : dv;
  return chunk >= 1 && dk > 0 && dv > 0 && dk % 32 == 0 && dv % 32 == 0 && width <= 256 && chunk <= width &&
         chunk * width <= 8192;
}

cudaError_t KdaChunkProductsForward(const KdaChunkProducts& s, const float* q, const float* k, const float* v,
                                    const float* g_cum, const float* beta, float* qd, float* kb, float* ke,
                                    float* vb, float* decay, cudaStream_t stream) {
  if (!KdaChunkProductsSupports(s.chunk, s.dk, s.dv)) return cudaErrorInvalidValue;
  if (s.chunks == 0) return cudaSuccess;
  ProductsForwardKernel<<<static_cast<unsigned>(s.chunks), s.dk > s.dv ? s.dk : s.dv, 0, stream>>>(
      s, q, k, v, g_cum, beta, qd, kb, ke, vb, decay);
  return cudaGetLastError();
}

cudaError_t KdaChunkProductsBackward(const KdaChunkProducts& s, const float* q, const float* k, const float* v,
                                     const float* g_cum, const float* beta, const float* dqd, const float* dkb,
                                     const float* dke, const float* dvb, const float* ddecay, float* dq, float* dk,
                                     float* dv, float* dg_cum, float* dbeta, cudaStream_t stream) {
  if (!KdaChunkProductsSupports(s.chunk, s.dk, s.dv)) return cudaErrorInvalidValue;
  if (s.chunks == 0) return cudaSuccess;
  const int width = s.dk > s.dv ? s.dk : s.dv;
  ProductsBackwardKernel<<<static_cast<unsigned>(s.chunks), width, s.chunk * width * sizeof(float), stream>>>(
      s, q, k, v, g_cum, beta, dqd, dkb, dke, dvb, ddecay, dq, dk, dv, dg_cum, dbeta);
  return cudaGetLastError();
}

}  // namespace kp::runtime::cuda
