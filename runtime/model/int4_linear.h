// The routed experts' frozen INT4 base as LibTorch tensors, in the released
// format of weights/int4.h (compressed-tensors pack-quantized, symmetric,
// groups of 32 along each row, bf16 scales): quantising a weight bank, and a
// linear layer that reads the packed weight, dequantizing it inside the
// product in the forward and again in the backward, so that no dequantized
// copy outlives the call (the bf16 weight a plain linear would keep for its
// backward is what an INT4 base is there to save). The weight gets no
// gradient: the base is frozen, LoRA's adapters train beside it.
// Thread-safety: pure functions.
#ifndef KIMI_PLAN_RUNTIME_MODEL_INT4_LINEAR_H_
#define KIMI_PLAN_RUNTIME_MODEL_INT4_LINEAR_H_

#include <torch/torch.h>

namespace kp::runtime {

/// A weight [..., rows, cols] as INT4: packed [..., rows, cols / 8] int32
/// (eight q + 8 per word, element j in bits 4j..4j+3) and scales [..., rows,
/// cols / 32] bf16. The same bits as weights/int4.h's QuantizeInt4 on each
/// [rows, cols] matrix.
struct Int4Weight {
  torch::Tensor packed;
  torch::Tensor scales;
};

/// Quantises `w` (float, cols a multiple of 32; on any device). Throws
/// std::invalid_argument naming the shape otherwise.
Int4Weight QuantizeInt4Weight(const torch::Tensor& w);

/// q * s as [..., rows, cols] in `dtype`, on the packed tensor's device.
torch::Tensor DequantizeInt4Weight(const Int4Weight& w, c10::ScalarType dtype);

/// x [..., cols] times the dequantized weight [rows, cols] transposed:
/// [..., rows] in x's dtype; the gradient flows to x only.
torch::Tensor Int4Linear(const torch::Tensor& x, const Int4Weight& w);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_MODEL_INT4_LINEAR_H_
