// Kernels of attn_res_cuda.h. One warp per token; lane l takes packs of P
// channels (cuda_rows.cuh), so a warp's loads of a row are contiguous: P is
// one 16-byte access (8 bf16 or 4 fp32 channels) where the dim and every
// buffer allow it, else 1. Scalar 2-byte loads left these memory-bound
// kernels at a quarter of HBM bandwidth. The scores of the (at most
// kMaxDepthValues) values live in registers: every loop over the values is
// unrolled to that bound with a guard, so their indices are constants.
#include "runtime/kernels/attn_res_cuda.h"

#include "runtime/kernels/cuda_elementwise.cuh"
#include "runtime/kernels/cuda_rows.cuh"

namespace kp::runtime::cuda {
namespace {

using namespace rowwise;  // NOLINT: this file's kernels are row kernels

// The values' buffers as kernel parameters, indexed only by unrolled
// constants. The kernels ask for two blocks per SM (__launch_bounds__): the
// pointers would otherwise take enough registers to halve the occupancy.
template <typename T>
struct Values {
  const T* at[kMaxDepthValues];
};
template <typename T>
struct Grads {
  T* at[kMaxDepthValues];
};

// Per value i of one token: the score s_i, 1 / rms_i and, when `dread` is
// given, dalpha_i = dread . v_i; then softmax weights alpha.
template <typename T, int P>
struct Scores {
  float s[kMaxDepthValues], inv_rms[kMaxDepthValues], alpha[kMaxDepthValues], dalpha[kMaxDepthValues];

  __device__ void Compute(const Values<T>& v, std::int64_t row, int n, int dim, const float* w, float eps,
                          const T* dread) {
    const int lane = threadIdx.x % 32;
    float top = -INFINITY;
#pragma unroll
    for (int i = 0; i < kMaxDepthValues; ++i) {
      if (i >= n) break;
      float dot = 0.f, squares = 0.f, dot_grad = 0.f;
      for (int d = lane * P; d < dim; d += 32 * P) {
        float x[P], wd[P], g[P];
        LoadN<P>(v.at[i], row + d, x);
        LoadN<P>(w, d, wd);
        if (dread) LoadN<P>(dread, row + d, g);
#pragma unroll
        for (int e = 0; e < P; ++e) {
          dot += x[e] * wd[e];
          squares += x[e] * x[e];
          if (dread) dot_grad += x[e] * g[e];
        }
      }
      inv_rms[i] = rsqrtf(WarpSum(squares) / dim + eps);
      s[i] = WarpSum(dot) * inv_rms[i];
      dalpha[i] = dread ? WarpSum(dot_grad) : 0.f;
      top = fmaxf(top, s[i]);
    }
    float total = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxDepthValues; ++i) {
      if (i >= n) break;
      alpha[i] = __expf(s[i] - top);
      total += alpha[i];
    }
#pragma unroll
    for (int i = 0; i < kMaxDepthValues; ++i) {
      if (i >= n) break;
      alpha[i] /= total;
    }
  }
};

template <typename T, int P>
__global__ void __launch_bounds__(kWarps * 32, 2) ForwardKernel(Values<T> v, const float* __restrict__ w, float eps,
                                                            T* __restrict__ read, int n, std::int64_t tokens,
                                                            int dim) {
  const std::int64_t token = Row();
  if (token >= tokens) return;
  const std::int64_t row = token * dim;
  Scores<T, P> sc;
  sc.Compute(v, row, n, dim, w, eps, nullptr);
  for (int d = threadIdx.x % 32 * P; d < dim; d += 32 * P) {
    float acc[P] = {};
#pragma unroll
    for (int i = 0; i < kMaxDepthValues; ++i) {
      if (i >= n) break;
      float x[P];
      LoadN<P>(v.at[i], row + d, x);
#pragma unroll
      for (int e = 0; e < P; ++e) acc[e] += sc.alpha[i] * x[e];
    }
    StoreN<P>(read, row + d, acc);
  }
}

// With s_i = (v_i . w) / r_i: ds_i = alpha_i (dalpha_i - sum_j alpha_j dalpha_j),
// dv_i = alpha_i dread + ds_i (w / r_i - s_i v_i / (dim r_i^2)),
// dw  += sum_i ds_i v_i / r_i   (this token's row of dw_rows).
template <typename T, int P>
__global__ void __launch_bounds__(kWarps * 32, 2) BackwardKernel(Values<T> v, const float* __restrict__ w, float eps,
                                                             const T* __restrict__ dread, Grads<T> dv,
                                                             float* __restrict__ dw_rows, int n, std::int64_t tokens,
                                                             int dim) {
  const std::int64_t token = Row();
  if (token >= tokens) return;
  const std::int64_t row = token * dim;
  Scores<T, P> sc;
  sc.Compute(v, row, n, dim, w, eps, dread);
  float mean_dalpha = 0.f;
#pragma unroll
  for (int i = 0; i < kMaxDepthValues; ++i) {
    if (i >= n) break;
    mean_dalpha += sc.alpha[i] * sc.dalpha[i];
  }
  float ds[kMaxDepthValues];
#pragma unroll
  for (int i = 0; i < kMaxDepthValues; ++i) {
    if (i >= n) break;
    ds[i] = sc.alpha[i] * (sc.dalpha[i] - mean_dalpha);
  }
  for (int d = threadIdx.x % 32 * P; d < dim; d += 32 * P) {
    float g[P], wd[P], dw[P] = {};
    LoadN<P>(dread, row + d, g);
    LoadN<P>(w, d, wd);
#pragma unroll
    for (int i = 0; i < kMaxDepthValues; ++i) {
      if (i >= n) break;
      float x[P], grad[P];
      LoadN<P>(v.at[i], row + d, x);
      const float r = sc.inv_rms[i];
#pragma unroll
      for (int e = 0; e < P; ++e) {
        grad[e] = sc.alpha[i] * g[e] + ds[i] * (wd[e] * r - sc.s[i] * x[e] * r * r / dim);
        dw[e] += ds[i] * x[e] * r;
      }
      StoreN<P>(dv.at[i], row + d, grad);
    }
    StoreN<P>(dw_rows, row + d, dw);
  }
}

}  // namespace

bool DepthReadSupports(int values, int dim) {
  return values >= 1 && values <= kMaxDepthValues && dim > 0 && dim % 32 == 0;
}

namespace {

template <typename T>
Values<T> TypedValues(const DepthValues& v) {
  Values<T> out{};
  for (int i = 0; i < kMaxDepthValues; ++i) out.at[i] = static_cast<const T*>(v.at[i]);
  return out;
}

template <typename T>
Grads<T> TypedGrads(const DepthGrads& g) {
  Grads<T> out{};
  for (int i = 0; i < kMaxDepthValues; ++i) out.at[i] = static_cast<T*>(g.at[i]);
  return out;
}

// True when the kernels may take 16-byte packs of T: the dim a whole number
// of a warp's packs and every buffer 16-byte aligned.
template <typename T>
bool Packed(const DepthRead& s, std::initializer_list<const void*> buffers, const void* const* values) {
  if (s.dim % (32 * kPack<T>) != 0 || !elementwise::Aligned(buffers)) return false;
  for (int i = 0; i < s.values; ++i)
    if (!elementwise::Aligned({values[i]})) return false;
  return true;
}

template <typename T>
void LaunchForward(const DepthRead& s, const DepthValues& values, const float* w, float eps, void* read,
                   cudaStream_t stream) {
  auto launch = [&](auto kernel) {
    kernel<<<Blocks(s.tokens), kWarps * 32, 0, stream>>>(TypedValues<T>(values), w, eps, static_cast<T*>(read),
                                                        s.values, s.tokens, s.dim);
  };
  if (Packed<T>(s, {w, read}, values.at))
    launch(ForwardKernel<T, kPack<T>>);
  else
    launch(ForwardKernel<T, 1>);
}

template <typename T>
void LaunchBackward(const DepthRead& s, const DepthValues& values, const float* w, float eps, const void* dread,
                    const DepthGrads& dvalues, float* dw_rows, cudaStream_t stream) {
  auto launch = [&](auto kernel) {
    kernel<<<Blocks(s.tokens), kWarps * 32, 0, stream>>>(TypedValues<T>(values), w, eps, static_cast<const T*>(dread),
                                                        TypedGrads<T>(dvalues), dw_rows, s.values, s.tokens, s.dim);
  };
  const void* grads[kMaxDepthValues];
  for (int i = 0; i < kMaxDepthValues; ++i) grads[i] = dvalues.at[i];
  if (Packed<T>(s, {w, dread, dw_rows}, values.at) && Packed<T>(s, {}, grads))
    launch(BackwardKernel<T, kPack<T>>);
  else
    launch(BackwardKernel<T, 1>);
}

}  // namespace

cudaError_t DepthReadForward(const DepthRead& s, const DepthValues& values, const float* w, float eps, void* read,
                             cudaStream_t stream) {
  if (!DepthReadSupports(s.values, s.dim)) return cudaErrorInvalidValue;
  if (s.tokens == 0) return cudaSuccess;
  if (s.bf16)
    LaunchForward<__nv_bfloat16>(s, values, w, eps, read, stream);
  else
    LaunchForward<float>(s, values, w, eps, read, stream);
  return cudaGetLastError();
}

cudaError_t DepthReadBackward(const DepthRead& s, const DepthValues& values, const float* w, float eps,
                              const void* dread, const DepthGrads& dvalues, float* dw_rows, cudaStream_t stream) {
  if (!DepthReadSupports(s.values, s.dim)) return cudaErrorInvalidValue;
  if (s.tokens == 0) return cudaSuccess;
  if (s.bf16)
    LaunchBackward<__nv_bfloat16>(s, values, w, eps, dread, dvalues, dw_rows, stream);
  else
    LaunchBackward<float>(s, values, w, eps, dread, dvalues, dw_rows, stream);
  return cudaGetLastError();
}

}  // namespace kp::runtime::cuda
