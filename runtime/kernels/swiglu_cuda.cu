// Kernels of swiglu_cuda.h: 16-byte packs per thread of a grid-stride loop,
// with s = sigmoid(g):  h = g s u;  dg = dh u s (1 + g (1 - s));  du = dh g s.
#include "runtime/kernels/swiglu_cuda.h"

#include <cstdint>

#include "runtime/kernels/cuda_elementwise.cuh"
#include "runtime/kernels/cuda_rows.cuh"

namespace kp::runtime::cuda {
namespace {

using rowwise::Load;
using rowwise::Store;

using namespace elementwise;  // NOLINT: grid-stride elementwise kernels

// kPack elements of T in one 16-byte load or store.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

// Where every pointer is 16-byte aligned the kernels move Pack<T>s, the
// tail (count % kSize elements) and unaligned tensors one element at a time.
template <typename T>
__device__ __forceinline__ void ForwardAt(const T* gate, const T* up, T* h, std::int64_t i) {
  const float g = Load(gate, i), s = 1.f / (1.f + expf(-g));
  Store(h, i, g * s * Load(up, i));
}

template <typename T>
__device__ __forceinline__ void BackwardAt(const T* gate, const T* up, const T* dh, T* dgate, T* dup,
                                           std::int64_t i) {
  const float g = Load(gate, i), s = 1.f / (1.f + expf(-g)), d = Load(dh, i);
  Store(dgate, i, d * Load(up, i) * s * (1.f + g * (1.f - s)));
  Store(dup, i, d * g * s);
}

template <typename T>
__global__ void ForwardKernel(std::int64_t count, bool packed, const T* __restrict__ gate, const T* __restrict__ up,
                              T* __restrict__ h) {
  constexpr int kSize = Pack<T>::kSize;
  const std::int64_t packs = packed ? count / kSize : 0;
  for (std::int64_t p = FirstThread(); p < packs; p += AllThreads()) {
    const Pack<T> g = reinterpret_cast<const Pack<T>*>(gate)[p], u = reinterpret_cast<const Pack<T>*>(up)[p];
    Pack<T> out;
#pragma unroll
    for (int j = 0; j < kSize; ++j) ForwardAt(g.v, u.v, out.v, j);
    reinterpret_cast<Pack<T>*>(h)[p] = out;
  }
  for (std::int64_t i = packs * kSize + FirstThread(); i < count; i += AllThreads()) ForwardAt(gate, up, h, i);
}

template <typename T>
__global__ void BackwardKernel(std::int64_t count, bool packed, const T* __restrict__ gate, const T* __restrict__ up,
                               const T* __restrict__ dh, T* __restrict__ dgate, T* __restrict__ dup) {
  constexpr int kSize = Pack<T>::kSize;
  const std::int64_t packs = packed ? count / kSize : 0;
  for (std::int64_t p = FirstThread(); p < packs; p += AllThreads()) {
    const Pack<T> g = reinterpret_cast<const Pack<T>*>(gate)[p], u = reinterpret_cast<const Pack<T>*>(up)[p],
                  d = reinterpret_cast<const Pack<T>*>(dh)[p];
    Pack<T> dg, du;
#pragma unroll
    for (int j = 0; j < kSize; ++j) BackwardAt(g.v, u.v, d.v, dg.v, du.v, j);
    reinterpret_cast<Pack<T>*>(dgate)[p] = dg;
    reinterpret_cast<Pack<T>*>(dup)[p] = du;
  }
  for (std::int64_t i = packs * kSize + FirstThread(); i < count; i += AllThreads())
    BackwardAt(gate, up, dh, dgate, dup, i);
}

}  // namespace

cudaError_t SwiGluForward(const SwiGluShape& s, const void* gate, const void* up, void* h, cudaStream_t stream) {
  if (s.count == 0) return cudaSuccess;
  const bool packed = Aligned({gate, up, h});
  if (s.bf16)
    ForwardKernel<<<BlocksFor(s.count, 4), kThreads, 0, stream>>>(s.count, packed, static_cast<const __nv_bfloat16*>(gate),
                                                               static_cast<const __nv_bfloat16*>(up),
                                                               static_cast<__nv_bfloat16*>(h));
  else
    ForwardKernel<<<BlocksFor(s.count, 4), kThreads, 0, stream>>>(s.count, packed, static_cast<const float*>(gate),
                                                               static_cast<const float*>(up), static_cast<float*>(h));
  return cudaGetLastError();
}

cudaError_t SwiGluBackward(const SwiGluShape& s, const void* gate, const void* up, const void* dh, void* dgate,
                           void* dup, cudaStream_t stream) {
  if (s.count == 0) return cudaSuccess;
  const bool packed = Aligned({gate, up, dh, dgate, dup});
  if (s.bf16)
    BackwardKernel<<<BlocksFor(s.count, 4), kThreads, 0, stream>>>(
        s.count, packed, static_cast<const __nv_bfloat16*>(gate), static_cast<const __nv_bfloat16*>(up),
        static_cast<const __nv_bfloat16*>(dh), static_cast<__nv_bfloat16*>(dgate), static_cast<__nv_bfloat16*>(dup));
  else
    BackwardKernel<<<BlocksFor(s.count, 4), kThreads, 0, stream>>>(
        s.count, packed, static_cast<const float*>(gate), static_cast<const float*>(up), static_cast<const float*>(dh),
        static_cast<float*>(dgate), static_cast<float*>(dup));
  return cudaGetLastError();
}

}  // namespace kp::runtime::cuda
