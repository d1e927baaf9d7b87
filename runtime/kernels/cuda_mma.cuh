// Tensor-core and asynchronous-copy building blocks for the kernels (sm_80
// and newer, built here for sm_90): TF32 mma.sync on 16 x 8 x 8 tiles and
// FP8 (e4m3, sm_89 and newer) on 16 x 8 x 32 tiles, both with fp32
// accumulation, and cp.async into shared memory. Device code only.
//
// The fragment layouts are PTX's for mma.m16n8k8 .tf32 (g = lane / 4,
// t = lane % 4):
//   A (16 x 8, row):  a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
//   B (8 x 8, col):   b0 (t, g), b1 (t + 4, g)            as (k, n)
//   C (16 x 8):       c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1)
// and for mma.m16n8k32 .e4m3, each register four consecutive bytes along k:
//   A (16 x 32, row): a0 (g, 4t..4t+3), a1 (g + 8, 4t..), a2 (g, 16+4t..), a3 (g + 8, 16+4t..)
//   B (32 x 8, col):  b0 (4t..4t+3, g), b1 (16+4t..16+4t+3, g)     as (k, n)
//   C as above.
// So with both operands stored k-contiguous (A [m, k] and B^T [n, k]), each
// register is one 4-byte load.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_CUDA_MMA_CUH_
#define KIMI_PLAN_RUNTIME_KERNELS_CUDA_MMA_CUH_

#include <cstdint>

namespace kp::runtime::cuda {

/// `x` rounded to TF32 (10 mantissa bits; to nearest, ties away from zero).
__device__ __forceinline__ std::uint32_t ToTf32(float x) {
  std::uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

/// d += a b: a 16 x 8 TF32 A fragment, b = (b0, b1) an 8 x 8 TF32 B
/// fragment, d a 16 x 8 fp32 accumulator.
__device__ __forceinline__ void MmaTf32(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                        std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// d += a b: a 16 x 32 e4m3 A fragment, (b0, b1) a 32 x 8 e4m3 B fragment,
/// d a 16 x 8 fp32 accumulator.
__device__ __forceinline__ void MmaE4m3(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                        std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// A 16 x 8 accumulator tile, times `scale`, as the A fragment of a product
/// that reduces over the tile's 8 columns, without leaving registers. The
/// thread holds columns 2t and 2t + 1, which the A layout wants at k = t
/// and t + 4: the product's k order is permuted to (0, 2, 4, 6, 1, 3, 5, 7),
/// so the B fragment must take column 2t as its row t and 2t + 1 as t + 4
/// (b0 = B[2t][g], b1 = B[2t + 1][g] in the tile's own order).
__device__ __forceinline__ void AccumulatorAsA(const float (&c)[4], float scale, std::uint32_t (&a)[4]) {
  a[0] = ToTf32(scale * c[0]);
  a[1] = ToTf32(scale * c[2]);
  a[2] = ToTf32(scale * c[1]);
  a[3] = ToTf32(scale * c[3]);
}

/// 16 bytes global -> shared without passing through registers; both
/// addresses 16-byte aligned. Completes at CopyAsyncWait.
__device__ __forceinline__ void CopyAsync16(void* shared, const void* global) {
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(global));
}

/// CopyAsync16, or 16 zero bytes into `shared` when !`valid` (then
/// `global` is not read, but must still be a valid address).
__device__ __forceinline__ void CopyAsync16OrZero(void* shared, const void* global, bool valid) {
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(global), "r"(bytes));
}

/// Closes the group of copies issued since the last commit.
__device__ __forceinline__ void CopyAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }

/// Waits until at most `kPending` committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void CopyAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace kp::runtime::cuda

#endif  // KIMI_PLAN_RUNTIME_KERNELS_CUDA_MMA_CUH_
