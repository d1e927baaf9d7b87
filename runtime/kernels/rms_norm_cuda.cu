// Kernels of rms_norm_cuda.h: one warp per row, lane l on channels l,
// l + 32, ...; two passes over the row (the sums, then the outputs), so any
// width fits.
//   r = 1 / sqrt(mean(x^2) + eps),  y = x r w
//   dx = r (dy w) - x r^3 mean(dy w x),   dw += dy x r
#include "runtime/kernels/rms_norm_cuda.h"

#include "runtime/kernels/cuda_rows.cuh"

namespace kp::runtime::cuda {
namespace {

using namespace rowwise;  // NOLINT: this file's kernels are row kernels

template <typename T>
__global__ void __launch_bounds__(kWarps * 32) ForwardKernel(const T* __restrict__ x, const float* __restrict__ w,
                                                            float eps, T* __restrict__ y, std::int64_t rows,
                                                            int dim) {
  const std::int64_t row = Row();
  if (row >= rows) return;
  const std::int64_t at = row * dim;
  const int lane = threadIdx.x % 32;
  float squares = 0.f;
  for (int d = lane; d < dim; d += 32) {
    const float v = Load(x, at + d);
    squares += v * v;
  }
  const float r = rsqrtf(WarpSum(squares) / dim + eps);
  for (int d = lane; d < dim; d += 32) Store(y, at + d, Load(x, at + d) * r * w[d]);
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32) BackwardKernel(const T* __restrict__ x, const float* __restrict__ w,
                                                             float eps, const T* __restrict__ dy,
                                                             T* __restrict__ dx, float* __restrict__ dw_rows,
                                                             std::int64_t rows, int dim) {
  const std::int64_t row = Row();
  if (row >= rows) return;
  const std::int64_t at = row * dim;
  const int lane = threadIdx.x % 32;
  float squares = 0.f, dot = 0.f;
  for (int d = lane; d < dim; d += 32) {
    const float v = Load(x, at + d);
    squares += v * v;
    dot += Load(dy, at + d) * w[d] * v;
  }
  const float r = rsqrtf(WarpSum(squares) / dim + eps);
  const float mean_dot = WarpSum(dot) / dim;
  for (int d = lane; d < dim; d += 32) {
    const float v = Load(x, at + d), g = Load(dy, at + d);
    Store(dx, at + d, r * g * w[d] - v * r * r * r * mean_dot);
    dw_rows[at + d] = g * v * r;
  }
}

// The gated norm's row `row` in (b, t, h) order: its offsets in x and dx.
struct GatedRow {
  std::int64_t x, dx;
};

__device__ __forceinline__ GatedRow GatedRowAt(const GatedNormRows& s, std::int64_t row) {
  const std::int64_t h = row % s.heads, bt = row / s.heads, t = bt % s.tokens, b = bt / s.tokens;
  return {b * s.x_strides[0] + t * s.x_strides[1] + h * s.x_strides[2],
          b * s.dx_strides[0] + t * s.dx_strides[1] + h * s.dx_strides[2]};
}

__device__ __forceinline__ float Sigmoid(float g) { return 1.f / (1.f + expf(-g)); }

//   y = x r w s,  s = sigmoid(gate)
//   dn = dy s:  dx = r (dn w) - x r^3 mean(dn w x),  dw += dn x r,  dgate = dy x r w s (1 - s)
template <typename T>
__global__ void __launch_bounds__(kWarps * 32) GatedForwardKernel(GatedNormRows s, const float* __restrict__ x,
                                                                 const T* __restrict__ gate,
                                                                 const float* __restrict__ w, float eps,
                                                                 T* __restrict__ y) {
  const std::int64_t row = Row();
  if (row >= s.batch * s.tokens * s.heads) return;  // rows(): host only
  const std::int64_t at = GatedRowAt(s, row).x, out = row * s.dim;
  const int lane = threadIdx.x % 32;
  float squares = 0.f;
  for (int d = lane; d < s.dim; d += 32) squares += x[at + d] * x[at + d];
  const float r = rsqrtf(WarpSum(squares) / s.dim + eps);
  for (int d = lane; d < s.dim; d += 32) Store(y, out + d, x[at + d] * r * w[d] * Sigmoid(Load(gate, out + d)));
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    GatedBackwardKernel(GatedNormRows s, const float* __restrict__ x, const T* __restrict__ gate,
                        const float* __restrict__ w, float eps, const T* __restrict__ dy, float* __restrict__ dx,
                        T* __restrict__ dgate, float* __restrict__ dw_rows) {
  const std::int64_t row = Row();
  if (row >= s.batch * s.tokens * s.heads) return;  // rows(): host only
  const GatedRow at = GatedRowAt(s, row);
  const std::int64_t out = row * s.dim;
  const int lane = threadIdx.x % 32;
  float squares = 0.f, dot = 0.f;
  for (int d = lane; d < s.dim; d += 32) {
    const float v = x[at.x + d];
    squares += v * v;
    dot += Load(dy, out + d) * Sigmoid(Load(gate, out + d)) * w[d] * v;
  }
  const float r = rsqrtf(WarpSum(squares) / s.dim + eps);
  const float mean_dot = WarpSum(dot) / s.dim;
  for (int d = lane; d < s.dim; d += 32) {
    const float v = x[at.x + d], g = Load(dy, out + d), sg = Sigmoid(Load(gate, out + d)), dn = g * sg;
    dx[at.dx + d] = r * dn * w[d] - v * r * r * r * mean_dot;
    Store(dgate, out + d, g * v * r * w[d] * sg * (1.f - sg));
    dw_rows[out + d] = dn * v * r;
  }
}

}  // namespace

bool RmsNormSupports(int dim) { return dim > 0 && dim % 32 == 0; }

cudaError_t RmsNormForward(const NormRows& s, const void* x, const float* w, float eps, void* y,
                           cudaStream_t stream) {
  if (!RmsNormSupports(s.dim)) return cudaErrorInvalidValue;
  if (s.rows == 0) return cudaSuccess;
  if (s.bf16)
    ForwardKernel<<<Blocks(s.rows), kWarps * 32, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), w, eps,
                                                               static_cast<__nv_bfloat16*>(y), s.rows, s.dim);
  else
    ForwardKernel<<<Blocks(s.rows), kWarps * 32, 0, stream>>>(static_cast<const float*>(x), w, eps,
                                                               static_cast<float*>(y), s.rows, s.dim);
  return cudaGetLastError();
}

cudaError_t RmsNormBackward(const NormRows& s, const void* x, const float* w, float eps, const void* dy, void* dx,
                            float* dw_rows, cudaStream_t stream) {
  if (!RmsNormSupports(s.dim)) return cudaErrorInvalidValue;
  if (s.rows == 0) return cudaSuccess;
  if (s.bf16)
    BackwardKernel<<<Blocks(s.rows), kWarps * 32, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x), w, eps, static_cast<const __nv_bfloat16*>(dy),
        static_cast<__nv_bfloat16*>(dx), dw_rows, s.rows, s.dim);
  else
    BackwardKernel<<<Blocks(s.rows), kWarps * 32, 0, stream>>>(static_cast<const float*>(x), w, eps,
                                                                static_cast<const float*>(dy),
                                                                static_cast<float*>(dx), dw_rows, s.rows, s.dim);
  return cudaGetLastError();
}

}  // namespace kp::runtime::cuda

namespace kp::runtime::cuda {

cudaError_t GatedRmsNormForward(const GatedNormRows& s, const float* x, const void* gate, const float* w, float eps,
                                void* y, cudaStream_t stream) {
  if (!RmsNormSupports(s.dim) || s.heads <= 0) return cudaErrorInvalidValue;
  if (s.rows() == 0) return cudaSuccess;
  if (s.bf16)
    GatedForwardKernel<<<Blocks(s.rows()), kWarps * 32, 0, stream>>>(
        s, x, static_cast<const __nv_bfloat16*>(gate), w, eps, static_cast<__nv_bfloat16*>(y));
  else
    GatedForwardKernel<<<Blocks(s.rows()), kWarps * 32, 0, stream>>>(s, x, static_cast<const float*>(gate), w, eps,
                                                                    static_cast<float*>(y));
  return cudaGetLastError();
}

cudaError_t GatedRmsNormBackward(const GatedNormRows& s, const float* x, const void* gate, const float* w, float eps,
                                 const void* dy, float* dx, void* dgate, float* dw_rows, cudaStream_t stream) {
  if (!RmsNormSupports(s.dim) || s.heads <= 0) return cudaErrorInvalidValue;
  if (s.rows() == 0) return cudaSuccess;
  if (s.bf16)
    GatedBackwardKernel<<<Blocks(s.rows()), kWarps * 32, 0, stream>>>(
        s, x, static_cast<const __nv_bfloat16*>(gate), w, eps, static_cast<const __nv_bfloat16*>(dy), dx,
        static_cast<__nv_bfloat16*>(dgate), dw_rows);
  else
    GatedBackwardKernel<<<Blocks(s.rows()), kWarps * 32, 0, stream>>>(s, x, static_cast<const float*>(gate), w, eps,
                                                                     static_cast<const float*>(dy), dx,
                                                                     static_cast<float*>(dgate), dw_rows);
  return cudaGetLastError();
}

}  // namespace kp::runtime::cuda
