// INT4 weights as Kimi K2.6 releases its routed experts: compressed-tensors'
// "pack-quantized" format, symmetric, groups of 32 along each row
// (the input dimension). Per row of `cols` weights:
//   weight_scale  [rows, cols / 32]  bf16: s = max |w| of the group / 7.5
//   q = clamp(round(w / s), -8, 7)   (round half away from zero)
//   weight_packed [rows, cols / 8]   int32: eight q + 8 (0..15) per word,
//                                    element j of the eight in bits 4j..4j+3
//   weight_shape  [2]                int32: rows, cols
// and w is read back as q * s. The round trip's error is at most
// |w - q s| <= s (1/2 + 7.5 x 2^-8) for s the stored bf16 scale: half a step,
// plus what bf16's rounding of max / 7.5 (at most 2^-8 relative) moves the
// group's largest weight past 7.5 s, where it is clamped to 7 s (tested in
// int4_test.cc). No LibTorch: the runtime's expert GEMMs call these on
// bytes. Thread-safety: pure functions.
#ifndef KIMI_PLAN_WEIGHTS_INT4_H_
#define KIMI_PLAN_WEIGHTS_INT4_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace kp {

inline constexpr int kInt4Group = 32;

/// fp32 to bf16 bits, rounded to nearest even; and back.
std::uint16_t ToBf16(float x);
float FromBf16(std::uint16_t b);

struct PackedInt4 {
  int rows = 0, cols = 0;
  std::vector<std::int32_t> packed;   ///< [rows, cols / 8]
  std::vector<std::uint16_t> scales;  ///< [rows, cols / 32], bf16 bits
};

/// The packed form of row-major `w` [rows, cols]; InvalidArgument naming
/// `what` unless cols is a positive multiple of 32 and w has rows x cols.
Result<PackedInt4> QuantizeInt4(const std::vector<float>& w, int rows, int cols, const std::string& what);
/// The weights q * s of a packed form, row-major [rows, cols] fp32.
/// InvalidArgument naming `what` when the parts' sizes disagree with the shape.
Result<std::vector<float>> DequantizeInt4(const PackedInt4& p, const std::string& what);

/// The eight-per-word packing alone: q in [-8, 7] row-major [rows, cols]
/// (cols a multiple of 8) to words, and back.
std::vector<std::int32_t> PackInt4(const std::vector<std::int8_t>& q, int rows, int cols);
std::vector<std::int8_t> UnpackInt4(const std::vector<std::int32_t>& packed, int rows, int cols);

}  // namespace kp

#endif  // KIMI_PLAN_WEIGHTS_INT4_H_
