#include "runtime/model/fp8_linear.h"

#include <stdexcept>
#include <string>

#include "runtime/kernels/fp8_gemm.h"

namespace kp::runtime {

namespace {

constexpr std::int64_t kFloatMantissaBits = 23;
constexpr std::int64_t kFloatExponentBias = 127;
constexpr std::int64_t kE4m3MantissaBits = 3;
constexpr std::int64_t kE4m3MinExponent = -6;  // of the smallest normal, 2^-6; subnormals share its spacing

// 2^e for integer e (int32 tensor, within fp32's normal range), built from
// the exponent bits: exact, where pow or ldexp may round on some platforms.
torch::Tensor PowerOfTwo(const torch::Tensor& e) {
  return ((e + kFloatExponentBias) * (std::int64_t(1) << kFloatMantissaBits)).to(torch::kInt).view(torch::kFloat);
}

// t [rows, cols] with zero rows and columns appended up to the next
// multiples; t itself when it already has them.
torch::Tensor ZeroPadded(const torch::Tensor& t, std::int64_t row_multiple, std::int64_t col_multiple) {
  const std::int64_t rows = (row_multiple - t.size(0) % row_multiple) % row_multiple;
  const std::int64_t cols = (col_multiple - t.size(1) % col_multiple) % col_multiple;
  return rows == 0 && cols == 0 ? t : torch::constant_pad_nd(t, {0, cols, 0, rows});
}

}  // namespace

torch::Tensor RoundToE4m3(const torch::Tensor& v) {
  const torch::Tensor x = v.to(torch::kFloat);
  const torch::Tensor a = x.abs().clamp_max(kE4m3Max);
  // a = m 2^e with m in [0.5, 1): the binade's exponent is e - 1, and the
  // grid's spacing there 2^(e - 1 - 3), never finer than the subnormals'.
  const torch::Tensor exponent = std::get<1>(torch::frexp(a)).sub(1).clamp_min(kE4m3MinExponent);
  const torch::Tensor spacing = PowerOfTwo(exponent - kE4m3MantissaBits);
  // a / spacing is exact (a power of two) and round() takes ties to even,
  // which is the even mantissa: the spacing's multiples alternate parity.
  const torch::Tensor q = torch::round(a / spacing).mul(spacing).clamp_max(kE4m3Max);
  return torch::where(torch::isnan(x), x, torch::copysign(q, x));
}

torch::Tensor FakeQuantizeFp8Blocks(const torch::Tensor& x, std::int64_t tile_rows, std::int64_t tile_cols) {
  if (x.dim() != 2 || tile_rows < 1 || tile_cols < 1)
    throw std::invalid_argument("FakeQuantizeFp8Blocks: a 2-D tensor and positive tiles, got " +
                                std::to_string(x.dim()) + "-D");
  const std::int64_t rows = x.size(0), cols = x.size(1);
  // Zero padding changes no tile's largest magnitude.
  const torch::Tensor padded = ZeroPadded(x.to(torch::kFloat), tile_rows, tile_cols);
  const std::int64_t padded_rows = padded.size(0), padded_cols = padded.size(1);
  const torch::Tensor tiles = padded.reshape({padded_rows / tile_rows, tile_rows, padded_cols / tile_cols, tile_cols});
  // amax / 448 as an elementwise division by a tensor: CUDA divides by a
  // scalar through its reciprocal, one ulp away at times, and the scale
  // must be the same on every device.
  const torch::Tensor amax = tiles.abs().amax({1, 3}, /*keepdim=*/true);
  torch::Tensor scale = amax / torch::full_like(amax, kE4m3Max);
  scale = torch::where(scale > 0, scale, torch::ones_like(scale));
  const torch::Tensor dequantized = RoundToE4m3(tiles / scale).mul(scale);
  return dequantized.view({padded_rows, padded_cols}).narrow(0, 0, rows).narrow(1, 0, cols);
}

namespace {

torch::Tensor Rows(const torch::Tensor& t) { return t.reshape({-1, t.size(-1)}); }

class Fp8LinearFunction : public torch::autograd::Function<Fp8LinearFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const torch::Tensor& w) {
    ctx->save_for_backward({x, w});
    const torch::Tensor xq = FakeQuantizeFp8Blocks(Rows(x), 1, kFp8Block);
    const torch::Tensor wq = FakeQuantizeFp8Blocks(w, kFp8Block, kFp8Block);
    std::vector<std::int64_t> shape = x.sizes().vec();
    shape.back() = w.size(0);
    return {xq.mm(wq.t()).to(x.scalar_type()).view(shape)};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1];
    const torch::Tensor dy = Rows(grads[0]);
    // Dgrad reduces over the output features: dy's tiles run along them, as
    // x's do along the inputs in the forward; the weight's square blocks
    // serve both products. They are quantised again rather than kept from
    // the forward: an fp32 copy of every expert's weight held until the
    // backward would cost more than the pass (as Int4Linear's dequantization).
    // The activations' 128x1 tiles differ from the forward's 1x128, so x is
    // quantised afresh too.
    const torch::Tensor wq = FakeQuantizeFp8Blocks(w, kFp8Block, kFp8Block);
    const torch::Tensor dx = FakeQuantizeFp8Blocks(dy, 1, kFp8Block).mm(wq).to(x.scalar_type()).view(x.sizes());
    // Wgrad reduces over the tokens: both operands tiled along them.
    const torch::Tensor dw = FakeQuantizeFp8Blocks(dy, kFp8Block, 1)
                                 .t()
                                 .mm(FakeQuantizeFp8Blocks(Rows(x), kFp8Block, 1))
                                 .to(w.scalar_type());
    return {dx, dw};
  }
};

// The tensor-core form. cuBLASLt's FP8 GEMM wants every dimension in
// whole tiles and a reduced dimension beside a block operand in whole
// groups of four (fp8_gemm.h): tokens to 128, features to 512. The
// operands are zero-padded, which changes no tile's largest magnitude and
// adds only zero products, and the results cut back. Every transpose is
// written by the quantising kernel, in e4m3.
class Fp8GemmLinearFunction : public torch::autograd::Function<Fp8GemmLinearFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const torch::Tensor& w) {
    ctx->save_for_backward({x, w});
    const torch::Tensor x2 = Rows(x);
    const torch::Tensor y = Fp8Matmul(QuantizeFp8(ZeroPadded(x2, kTokens, kFeatures), false),
                                      QuantizeFp8(ZeroPadded(w, kTokens, kFeatures), true), x.scalar_type());
    std::vector<std::int64_t> shape = x.sizes().vec();
    shape.back() = w.size(0);
    return {y.narrow(0, 0, x2.size(0)).narrow(1, 0, w.size(0)).reshape(shape)};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1];
    const torch::Tensor dy = ZeroPadded(Rows(grads[0]).to(x.scalar_type()), kTokens, kFeatures);
    // Dgrad: dy's 1x128 tiles run along the output features, the reduced
    // dimension; w^T's blocks are w's, transposed. Wgrad reduces over the
    // tokens: dy^T and x^T, their 1x128 tiles along them.
    torch::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) {
      const Fp8Operand w_t = QuantizeFp8(ZeroPadded(w, kFeatures, kFeatures), true, /*transpose=*/true);
      dx = Fp8Matmul(QuantizeFp8(dy, false), w_t, x.scalar_type())
               .narrow(0, 0, x.numel() / x.size(-1))
               .narrow(1, 0, x.size(-1))
               .reshape(x.sizes());
    }
    if (ctx->needs_input_grad(1)) {
      const torch::Tensor x2 = ZeroPadded(Rows(x), kTokens, kFeatures);
      dw = Fp8Matmul(QuantizeFp8(dy, false, true), QuantizeFp8(x2, false, true), w.scalar_type())
               .narrow(0, 0, w.size(0))
               .narrow(1, 0, w.size(1));
    }
    return {dx, dw};
  }

 private:
  static constexpr std::int64_t kTokens = kFp8Block, kFeatures = 4 * kFp8Block;
};

void CheckShapes(const torch::Tensor& x, const torch::Tensor& w) {
  if (w.dim() != 2 || x.size(-1) != w.size(1))
    throw std::invalid_argument("Fp8Linear: x [..., " + std::to_string(x.size(-1)) + "] against a weight of " +
                                std::to_string(w.dim()) + " dims, " + std::to_string(w.size(-1)) + " inputs");
}

}  // namespace

torch::Tensor Fp8Linear(const torch::Tensor& x, const torch::Tensor& w) {
  CheckShapes(x, w);
  if (Fp8GemmApplies(x) && Fp8GemmApplies(w) && x.numel() > 0) return Fp8GemmLinearFunction::apply(x, w)[0];
  return Fp8LinearFunction::apply(x, w)[0];
}

torch::Tensor Fp8LinearEmulated(const torch::Tensor& x, const torch::Tensor& w) {
  CheckShapes(x, w);
  return Fp8LinearFunction::apply(x, w)[0];
}

}  // namespace kp::runtime
