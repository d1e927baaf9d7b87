// Kernels of rms_norm_cuda.h: one warp per row, lane l on channels l,
// l + 32, ...; two passes over the row (the sums, then the outputs), so any
// width fits.
//   r = 1 / sqrt(mean(x^2) + eps),  y = x r w
//   dx = r (dy w) - x r^3 mean(dy w x),   dw += dy x r
#include "runtime/model/rms_norm_cuda.h"

#include "runtime/model/cuda_rows.cuh"

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
