// The grouped FP8 products: the entries over fp8_grouped_gemm_cuda.h and
// fp8_gemm_cuda.h's quantisers, or, in a build without them, entries that
// say no.
#include "runtime/kernels/fp8_grouped_gemm.h"

#include <cstdint>
#include <string>

#if KIMI_PLAN_FP8_KERNELS
#include "runtime/kernels/fp8_gemm_cuda.h"
#include "runtime/kernels/fp8_grouped_gemm_cuda.h"
#include "runtime/kernels/kernel_support.h"
#else
#include "runtime/kernels/no_kernels.h"
#endif

namespace kp::runtime {

#if KIMI_PLAN_FP8_KERNELS

using namespace kernel_support;

namespace {

constexpr std::int64_t kTile = cuda::kFp8Tile;
constexpr c10::ScalarType kE4m3 = c10::ScalarType::Float8_e4m3fn;

const int* Ends(const torch::Tensor& ends) { return ends.data_ptr<int>(); }

void CheckOutDtype(const char* kernel, c10::ScalarType out_dtype) {
  TORCH_CHECK(out_dtype == torch::kBFloat16 || out_dtype == torch::kFloat, kernel, ": out_dtype ",
              c10::toString(out_dtype), ", where bf16 or fp32 is written");
}

// The kernels read the operands' rows 16 bytes at a time.
void CheckRowMajor(const char* kernel, const Fp8Operand& a, const Fp8Operand& b) {
  for (const auto& [name, t] : {std::pair<const char*, const torch::Tensor*>{"a", &a.values}, {"b", &b.values}}) {
    TORCH_CHECK(t->is_contiguous(), kernel, ": ", name, ": not contiguous, where row-major values are read");
    TORCH_CHECK(reinterpret_cast<std::uintptr_t>(t->data_ptr()) % 16 == 0, kernel, ": ", name,
                ": data not 16-byte aligned, where it is read 16 bytes at a time");
  }
}

// Before anything reads ends' size.
void CheckEnds(const char* kernel, const torch::Tensor& ends, const torch::Tensor& on) {
  CheckKernelInputs(kernel, {{"on", &on, {}, {on.scalar_type()}}, {"ends", &ends, {kAnySize}, {torch::kInt}}});
  TORCH_CHECK(ends.size(0) >= 1 && ends.is_contiguous(), kernel, ": ends: sizes ", ends.sizes(),
              ", where a contiguous [groups] with groups >= 1 is read");
}

// A tiles operand's scales as the kernels read them: [rows, k / 128]
// column-major, i.e. tile t of row r at t * rows + r.
void CheckTileScales(const char* kernel, const char* name, const Fp8Operand& o) {
  const std::int64_t rows = o.values.size(-2), tiles = o.values.size(-1) / kTile;
  TORCH_CHECK(!o.blocks && o.scales.scalar_type() == torch::kFloat && o.scales.dim() == 2 &&
                  o.scales.size(0) == rows && o.scales.size(1) == tiles && o.scales.stride(0) == 1 &&
                  o.scales.stride(1) == rows,
              kernel, ": ", name, ": scales ", o.scales.sizes(), " strides ", o.scales.strides(),
              ", where 1 x 128 tiles' fp32 [", rows, ", ", tiles, "] column-major are read");
}

}  // namespace

bool Fp8GroupedGemmApplies(const torch::Tensor& x) { return Fp8GemmApplies(x); }

Fp8Operand QuantizeFp8Experts(const torch::Tensor& w, bool transpose) {
  const char* name = transpose ? "QuantizeFp8Experts (transposed)" : "QuantizeFp8Experts";
  CheckFp8GemmInput(name, "w", w);
  TORCH_CHECK(w.dim() == 3 && w.size(1) % kTile == 0 && w.size(2) % kTile == 0, name, ": w: sizes ", w.sizes(),
              ", where [experts, n, k] with n and k multiples of 128 is read");
  const c10::cuda::CUDAGuard guard(w.device());
  const torch::Tensor in = w.contiguous();
  const std::int64_t experts = in.size(0), rows = in.size(1), cols = in.size(2);
  Fp8Operand o;
  o.blocks = true;
  o.values = transpose ? torch::empty({experts, cols, rows}, in.options().dtype(kE4m3))
                       : torch::empty(in.sizes(), in.options().dtype(kE4m3));
  o.scales = torch::empty({experts, o.values.size(1) / kTile, o.values.size(2) / kTile},
                          in.options().dtype(torch::kFloat));
  Check(cuda::QuantizeFp8BlockTiles(rows, cols, in.data_ptr(), in.scalar_type() == torch::kBFloat16, transpose,
                                    OutBytes(o.values), Out(o.scales), c10::cuda::getCurrentCUDAStream(),
                                    experts),
        name);
  return o;
}

Fp8Operand QuantizeFp8GroupedTransposed(const torch::Tensor& x, const torch::Tensor& ends) {
  const char* name = "QuantizeFp8GroupedTransposed";
  CheckFp8GemmInput(name, "x", x);
  TORCH_CHECK(x.dim() == 2 && x.size(1) % kTile == 0, name, ": x: sizes ", x.sizes(),
              ", where [rows, cols] with cols a multiple of 128 is read");
  CheckEnds(name, ends, x);
  const c10::cuda::CUDAGuard guard(x.device());
  const torch::Tensor in = x.contiguous();
  const std::int64_t rows = in.size(0), cols = in.size(1), groups = ends.size(0);
  const std::int64_t capacity = cuda::GroupedTileCapacity(rows, groups);
  Fp8Operand o;
  o.values = torch::empty({cols, capacity * kTile}, in.options().dtype(kE4m3));
  torch::Tensor scales_t = torch::empty({capacity, cols}, in.options().dtype(torch::kFloat));
  Check(cuda::QuantizeFp8GroupedColumnTilesTransposed(rows, cols, in.data_ptr(), in.scalar_type() == torch::kBFloat16,
                                                      Ends(ends), static_cast<int>(groups), capacity,
                                                      OutBytes(o.values), Out(scales_t),
                                                      c10::cuda::getCurrentCUDAStream()),
        name);
  o.scales = scales_t.t();
  return o;
}

torch::Tensor Fp8GroupedMatmul(const Fp8Operand& a, const Fp8Operand& b, const torch::Tensor& ends,
                               c10::ScalarType out_dtype) {
  const char* name = "Fp8GroupedMatmul";
  CheckOutDtype(name, out_dtype);
  CheckEnds(name, ends, a.values);
  const std::int64_t k = a.values.size(-1), groups = ends.size(0);
  CheckKernelInputs(name, {{"a", &a.values, {kAnySize, k}, {kE4m3}}, {"b", &b.values, {groups, kAnySize, k}, {kE4m3}}});
  const std::int64_t m = a.values.size(0), n = b.values.size(1);
  TORCH_CHECK(k % kTile == 0 && n % kTile == 0, name, ": b: sizes ", b.values.sizes(),
              ", where n and k multiples of 128 are read");
  CheckTileScales(name, "a", a);
  TORCH_CHECK(b.blocks && b.scales.scalar_type() == torch::kFloat && b.scales.is_contiguous() &&
                  b.scales.sizes() == torch::IntArrayRef({groups, n / kTile, k / kTile}),
              name, ": b: scales ", b.scales.sizes(), ", where 128 x 128 blocks' contiguous fp32 [", groups, ", ",
              n / kTile, ", ", k / kTile, "] are read");
  CheckRowMajor(name, a, b);
  const c10::cuda::CUDAGuard guard(a.values.device());
  torch::Tensor out = torch::empty({m, n}, a.values.options().dtype(out_dtype));
  Check(cuda::Fp8GroupedRowsMatmul(m, n, k, static_cast<int>(groups), Ends(ends), InBytes(a.values), In(a.scales),
                                   InBytes(b.values), In(b.scales), out_dtype == torch::kBFloat16, out.data_ptr(),
                                   c10::cuda::getCurrentCUDAStream()),
        name);
  return out;
}

torch::Tensor Fp8GroupedWeightGrad(const Fp8Operand& a, const Fp8Operand& b, const torch::Tensor& ends,
                                   c10::ScalarType out_dtype) {
  const char* name = "Fp8GroupedWeightGrad";
  CheckOutDtype(name, out_dtype);
  CheckEnds(name, ends, a.values);
  const std::int64_t k = a.values.size(-1), groups = ends.size(0);
  CheckKernelInputs(name, {{"a", &a.values, {kAnySize, k}, {kE4m3}}, {"b", &b.values, {kAnySize, k}, {kE4m3}}});
  const std::int64_t n_a = a.values.size(0), n_b = b.values.size(0);
  TORCH_CHECK(n_a % kTile == 0 && n_b % kTile == 0 && k % kTile == 0, name, ": a, b: sizes ", a.values.sizes(),
              ", ", b.values.sizes(), ", where rows and k multiples of 128 are read");
  CheckTileScales(name, "a", a);
  CheckTileScales(name, "b", b);
  CheckRowMajor(name, a, b);
  const c10::cuda::CUDAGuard guard(a.values.device());
  torch::Tensor out = torch::empty({groups, n_a, n_b}, a.values.options().dtype(out_dtype));
  Check(cuda::Fp8GroupedReductionMatmul(n_a, n_b, k / kTile, static_cast<int>(groups), Ends(ends), InBytes(a.values),
                                        In(a.scales), InBytes(b.values), In(b.scales),
                                        out_dtype == torch::kBFloat16, out.data_ptr(),
                                        c10::cuda::getCurrentCUDAStream()),
        name);
  return out;
}

#else  // no FP8 kernels in this build

bool Fp8GroupedGemmApplies(const torch::Tensor&) { return false; }
Fp8Operand QuantizeFp8Experts(const torch::Tensor&, bool) { kernel_support::NoCudaKernels("QuantizeFp8Experts"); }
Fp8Operand QuantizeFp8GroupedTransposed(const torch::Tensor&, const torch::Tensor&) {
  kernel_support::NoCudaKernels("QuantizeFp8GroupedTransposed");
}
torch::Tensor Fp8GroupedMatmul(const Fp8Operand&, const Fp8Operand&, const torch::Tensor&, c10::ScalarType) {
  kernel_support::NoCudaKernels("Fp8GroupedMatmul");
}
torch::Tensor Fp8GroupedWeightGrad(const Fp8Operand&, const Fp8Operand&, const torch::Tensor&, c10::ScalarType) {
  kernel_support::NoCudaKernels("Fp8GroupedWeightGrad");
}

#endif

}  // namespace kp::runtime
