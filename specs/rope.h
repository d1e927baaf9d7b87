// The rotary position embedding a RopeSpec describes, as numbers: the
// frequencies of each channel pair and the two scale factors YaRN adds. Pure
// arithmetic in double; the runtime turns the frequencies into a tensor.
// The formulas are those of Hugging Face transformers' DeepSeek-V3 (YaRN
// with truncated correction dims), which is how the released Kimi K2 and
// DeepSeek-V3 weights were trained and are served.
#ifndef KIMI_PLAN_SPECS_ROPE_H_
#define KIMI_PLAN_SPECS_ROPE_H_

#include <vector>

#include "specs/model_spec.h"

namespace kp {

/// The rotation frequency of each of the dim/2 channel pairs (dim even):
/// theta^(-2i/dim); with YaRN, those divided by the factor for the pairs
/// below the correction range, unchanged above it, and a linear blend in it
/// (the range runs from floor(c(beta_fast)) to ceil(c(beta_slow)), with
/// c(n) = dim ln(L / (2 pi n)) / (2 ln theta) and L the original context).
std::vector<double> RopeInverseFrequencies(const RopeSpec& rope, int dim);

/// YaRN's factor on cos and sin (so on both q's and k's rotated channels):
/// m(factor, mscale) / m(factor, mscale_all_dim) with m(s, a) = 0.1 a ln s + 1
/// for s > 1 (else 1); m(factor, 1) when either mscale is 0. 1 without YaRN.
double RopeCosSinScale(const RopeSpec& rope);

/// The factor on MLA's softmax scale 1/sqrt(qk_head_dim): m(factor,
/// mscale_all_dim)^2 with YaRN and mscale_all_dim > 0, else 1.
double RopeSoftmaxScale(const RopeSpec& rope);

}  // namespace kp

#endif  // KIMI_PLAN_SPECS_ROPE_H_
