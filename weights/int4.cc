#include "weights/int4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

namespace kp {

std::uint16_t ToBf16(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if (std::isnan(x)) return 0x7fc0;
  // Round to nearest, ties to even: add 0x7fff plus the lowest kept bit.
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

float FromBf16(std::uint16_t b) {
  const std::uint32_t bits = std::uint32_t{b} << 16;
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}

std::vector<std::int32_t> PackInt4(const std::vector<std::int8_t>& q, int rows, int cols) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(rows) * (cols / 8), 0);
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::uint32_t word = 0;
    for (int j = 0; j < 8; ++j) word |= static_cast<std::uint32_t>(q[i * 8 + j] + 8) << (4 * j);
    out[i] = static_cast<std::int32_t>(word);
  }
  return out;
}

std::vector<std::int8_t> UnpackInt4(const std::vector<std::int32_t>& packed, int rows, int cols) {
  std::vector<std::int8_t> out(static_cast<std::size_t>(rows) * cols);
  for (std::size_t i = 0; i < packed.size(); ++i) {
    const std::uint32_t word = static_cast<std::uint32_t>(packed[i]);
    for (int j = 0; j < 8; ++j) out[i * 8 + j] = static_cast<std::int8_t>(((word >> (4 * j)) & 0xf) - 8);
  }
  return out;
}

Result<PackedInt4> QuantizeInt4(const std::vector<float>& w, int rows, int cols, const std::string& what) {
  if (rows < 1 || cols < kInt4Group || cols % kInt4Group != 0 || w.size() != std::size_t(rows) * cols)
    return Status::InvalidArgument(what + ": INT4 groups of 32 need a [rows, cols] weight with cols a multiple of 32, "
                                   "got [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
  PackedInt4 p;
  p.rows = rows, p.cols = cols;
  std::vector<std::int8_t> q(w.size());
  for (std::size_t g = 0; g < w.size() / kInt4Group; ++g) {
    const float* x = &w[g * kInt4Group];
    float largest = 0;
    for (int i = 0; i < kInt4Group; ++i) largest = std::max(largest, std::fabs(x[i]));
    // The stored (bf16) scale is the one every q is computed with, so the
    // error bound holds for what is read back.
    const std::uint16_t s_bits = ToBf16(largest / 7.5f);
    const float s = FromBf16(s_bits);
    p.scales.push_back(s_bits);
    for (int i = 0; i < kInt4Group; ++i) {
      const float r = s > 0 ? std::round(x[i] / s) : 0.0f;
      q[g * kInt4Group + i] = static_cast<std::int8_t>(std::clamp(r, -8.0f, 7.0f));
    }
  }
  p.packed = PackInt4(q, rows, cols);
  return p;
}

Result<std::vector<float>> DequantizeInt4(const PackedInt4& p, const std::string& what) {
  const std::size_t n = std::size_t(p.rows) * p.cols;
  if (p.rows < 1 || p.cols % kInt4Group != 0 || p.packed.size() != n / 8 || p.scales.size() != n / kInt4Group)
    return Status::InvalidArgument(what + ": weight_packed " + std::to_string(p.packed.size()) + " words and " +
                                   std::to_string(p.scales.size()) + " scales do not fit weight_shape [" +
                                   std::to_string(p.rows) + ", " + std::to_string(p.cols) + "]");
  const std::vector<std::int8_t> q = UnpackInt4(p.packed, p.rows, p.cols);
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = q[i] * FromBf16(p.scales[i / kInt4Group]);
  return out;
}

}  // namespace kp
