// Kernels of attn_res_cuda.h. One warp per token; lane l takes channels
// l, l + 32, ... so a warp's loads of a row are contiguous. The scores of
// the (at most kMaxDepthValues) values live in registers: every loop over
// the values is unrolled to that bound with a guard, so their indices are
// constants.
#include "runtime/kernels/attn_res_cuda.h"

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
template <typename T>
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
      for (int d = lane; d < dim; d += 32) {
        const float x = Load(v.at[i], row + d);
        dot += x * w[d];
        squares += x * x;
        if (dread) dot_grad += x * Load(dread, row + d);
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

template <typename T>
__global__ void __launch_bounds__(kWarps * 32, 2) ForwardKernel(Values<T> v, const float* __restrict__ w, float eps,
                                                            T* __restrict__ read, int n, std::int64_t tokens,
                                                            int dim) {
  const std::int64_t token = Row();
  if (token >= tokens) return;
  const std::int64_t row = token * dim;
  Scores<T> sc;
  sc.Compute(v, row, n, dim, w, eps, nullptr);
  for (int d = threadIdx.x % 32; d < dim; d += 32) {
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxDepthValues; ++i) {
      if (i >= n) break;
      acc += sc.alpha[i] * Load(v.at[i], row + d);
    }
    Store(read, row + d, acc);
  }
}

// With s_i = (v_i . w) / r_i: ds_i = alpha_i (dalpha_i - sum_j alpha_j dalpha_j),
// dv_i = alpha_i dread + ds_i (w / r_i - s_i v_i / (dim r_i^2)),
// dw  += sum_i ds_i v_i / r_i   (this token's row of dw_rows).
template <typename T>
__global__ void __launch_bounds__(kWarps * 32, 2) BackwardKernel(Values<T> v, const float* __restrict__ w, float eps,
                                                             const T* __restrict__ dread, Grads<T> dv,
                                                             float* __restrict__ dw_rows, int n, std::int64_t tokens,
                                                             int dim) {
  const std::int64_t token = Row();
  if (token >= tokens) return;
  const std::int64_t row = token * dim;
  Scores<T> sc;
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
  for (int d = threadIdx.x % 32; d < dim; d += 32) {
    const float g = Load(dread, row + d), wd = w[d];
    float dw = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxDepthValues; ++i) {
      if (i >= n) break;
      const float x = Load(v.at[i], row + d);
      const float r = sc.inv_rms[i];
      Store(dv.at[i], row + d, sc.alpha[i] * g + ds[i] * (wd * r - sc.s[i] * x * r * r / dim));
      dw += ds[i] * x * r;
    }
    dw_rows[row + d] = dw;
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

template <typename T>
void LaunchForward(const DepthRead& s, const DepthValues& values, const float* w, float eps, void* read,
                   cudaStream_t stream) {
  ForwardKernel<<<Blocks(s.tokens), kWarps * 32, 0, stream>>>(TypedValues<T>(values), w, eps, static_cast<T*>(read),
                                                               s.values, s.tokens, s.dim);
}

template <typename T>
void LaunchBackward(const DepthRead& s, const DepthValues& values, const float* w, float eps, const void* dread,
                    const DepthGrads& dvalues, float* dw_rows, cudaStream_t stream) {
  BackwardKernel<<<Blocks(s.tokens), kWarps * 32, 0, stream>>>(TypedValues<T>(values), w, eps,
                                                                static_cast<const T*>(dread), TypedGrads<T>(dvalues),
                                                                dw_rows, s.values, s.tokens, s.dim);
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
