#include "runtime/model/int4_linear.h"

#include <stdexcept>
#include <string>

#include "runtime/kernels/int4_dequant.h"

namespace kp::runtime {
namespace {

constexpr std::int64_t kGroup = 32;

std::vector<std::int64_t> WithLast(torch::IntArrayRef sizes, std::vector<std::int64_t> last) {
  std::vector<std::int64_t> out(sizes.begin(), sizes.end() - 1);
  out.insert(out.end(), last.begin(), last.end());
  return out;
}

// The element j of each word's bit offset, 4j, as a tensor to shift by.
torch::Tensor NibbleShifts(const torch::Device& device) {
  return torch::arange(0, 32, 4, torch::TensorOptions().dtype(torch::kLong).device(device));
}

class Int4LinearFunction : public torch::autograd::Function<Int4LinearFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& packed, const torch::Tensor& scales) {
    // Only the packed weight and its scales are kept: the dequantized
    // matrix is made again in the backward.
    ctx->save_for_backward({packed, scales});
    return torch::linear(x, DequantizeInt4Weight({packed, scales}, x.scalar_type()));
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& dy = grads[0];
    const torch::Tensor w = DequantizeInt4Weight({saved[0], saved[1]}, dy.scalar_type());
    return {torch::matmul(dy, w), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

Int4Weight QuantizeInt4Weight(const torch::Tensor& w) {
  const std::int64_t cols = w.dim() >= 2 ? w.size(-1) : 0;
  if (w.dim() < 2 || cols < kGroup || cols % kGroup != 0 || !w.is_floating_point())
    throw std::invalid_argument("QuantizeInt4Weight: a float [..., rows, cols] weight with cols a multiple of 32, got " +
                                std::string(w.sizes().vec().empty() ? "a scalar" : c10::str(w.sizes())));
  torch::NoGradGuard no_grad;
  const torch::Tensor x = w.detach().to(torch::kFloat).reshape(WithLast(w.sizes(), {cols / kGroup, kGroup}));
  // weights/int4.cc's arithmetic, each step in fp32: the scale rounded to
  // bf16 (nearest even, as c10's conversion) before any q is computed.
  const torch::Tensor largest = std::get<0>(x.abs().max(-1, /*keepdim=*/true));
  const torch::Tensor s_bf16 = (largest / torch::full_like(largest, 7.5)).to(torch::kBFloat16);
  const torch::Tensor s = s_bf16.to(torch::kFloat);
  const torch::Tensor ratio = torch::where(s > 0, x / s, torch::zeros_like(x));
  // std::round: halves away from zero (torch::round goes to even). The
  // fraction of a float is exact, so the comparison with 0.5 is too.
  const torch::Tensor whole = torch::trunc(ratio);
  const torch::Tensor rounded = whole + torch::where((ratio - whole).abs() >= 0.5, torch::sign(ratio), torch::zeros_like(ratio));
  const torch::Tensor q = rounded.clamp(-8, 7).to(torch::kLong) + 8;  // 0..15
  const torch::Tensor words = torch::bitwise_left_shift(q.reshape(WithLast(w.sizes(), {cols / 8, 8})), NibbleShifts(w.device())).sum(-1);
  // Words above 2^31 wrap to the negative int32 of the same bits.
  const torch::Tensor packed = (words - (words >= (std::int64_t{1} << 31)).to(torch::kLong) * (std::int64_t{1} << 32))
                                   .to(torch::kInt);
  return {packed, s_bf16.squeeze(-1)};
}

torch::Tensor DequantizeInt4Weight(const Int4Weight& w, c10::ScalarType dtype) {
  // On the GPU one kernel pass, the same values (int4_dequant.h).
  if (Int4DequantKernelApplies(w.packed, dtype)) return Int4DequantKernel(w.packed, w.scales, dtype);
  const std::int64_t words = w.packed.size(-1), cols = words * 8;
  // In int32: the arithmetic shift of a negative word brings in ones from
  // the left, which the mask drops, so each nibble comes out whole.
  const torch::Tensor shifts = NibbleShifts(w.packed.device()).to(torch::kInt);
  const torch::Tensor q = torch::bitwise_right_shift(w.packed.unsqueeze(-1), shifts).bitwise_and(0xf) - 8;
  const torch::Tensor scales = w.scales.to(torch::kFloat).repeat_interleave(kGroup, -1);
  return (q.reshape(WithLast(w.packed.sizes(), {cols})).to(torch::kFloat) * scales).to(dtype);
}

torch::Tensor Int4Linear(const torch::Tensor& x, const Int4Weight& w) {
  return Int4LinearFunction::apply(x, w.packed, w.scales);
}

}  // namespace kp::runtime
