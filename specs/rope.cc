#include "specs/rope.h"

#include <algorithm>
#include <cmath>

namespace kp {
namespace {

constexpr double kPi = 3.14159265358979323846;

double YarnMscale(double factor, double mscale) {
  if (factor <= 1) return 1.0;
  return 0.1 * mscale * std::log(factor) + 1.0;
}

// The channel index (of dim) at which a frequency completes `rotations`
// turns over the original context.
double CorrectionDim(double rotations, int dim, double theta, int positions) {
  return dim * std::log(positions / (rotations * 2 * kPi)) / (2 * std::log(theta));
}

}  // namespace

std::vector<double> RopeInverseFrequencies(const RopeSpec& rope, int dim) {
  const int half = dim / 2;
  std::vector<double> out(half);
  for (int i = 0; i < half; ++i) out[i] = std::pow(rope.theta, -2.0 * i / dim);
  const YarnScaling& y = rope.yarn;
  if (!y.enabled()) return out;
  const double low =
      std::max(std::floor(CorrectionDim(y.beta_fast, dim, rope.theta, y.original_max_positions)), 0.0);
  double high =
      std::min(std::ceil(CorrectionDim(y.beta_slow, dim, rope.theta, y.original_max_positions)), dim - 1.0);
  if (high == low) high += 0.001;  // as the reference does, so the ramp is a step
  for (int i = 0; i < half; ++i) {
    // ramp 0: the pair keeps its frequency (fast rotations); 1: divided by
    // the factor (slow rotations, the ones longer contexts stretch).
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    out[i] = out[i] / y.factor * ramp + out[i] * (1 - ramp);
  }
  return out;
}

double RopeCosSinScale(const RopeSpec& rope) {
  const YarnScaling& y = rope.yarn;
  if (!y.enabled()) return 1.0;
  if (y.mscale > 0 && y.mscale_all_dim > 0) return YarnMscale(y.factor, y.mscale) / YarnMscale(y.factor, y.mscale_all_dim);
  return YarnMscale(y.factor, 1.0);
}

double RopeSoftmaxScale(const RopeSpec& rope) {
  const YarnScaling& y = rope.yarn;
  if (!y.enabled() || y.mscale_all_dim <= 0) return 1.0;
  const double m = YarnMscale(y.factor, y.mscale_all_dim);
  return m * m;
}

}  // namespace kp
