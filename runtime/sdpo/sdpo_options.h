// The SDPO losses' options, apart from the losses themselves so that
// configurations (the CLI, runtime/sdpo_loop.h) need no LibTorch. Formulas:
// docs/sdpo.md; runtime/sdpo_loss.h implements them.
#ifndef KIMI_PLAN_RUNTIME_SDPO_SDPO_OPTIONS_H_
#define KIMI_PLAN_RUNTIME_SDPO_SDPO_OPTIONS_H_

#include "common/status.h"

namespace kp::runtime {

/// Top-k logit distillation (§3, §4). Defaults as the reference
/// (lasgroup/SDPO verl/trainer/config/actor/actor.yaml).
struct DistillOptions {
  int top_k = 100;       ///< support: the student's k most likely tokens; 0 = the full vocabulary
  bool add_tail = true;  ///< append the leftover mass as one bucket; false: renormalise the top k
  /// 0: forward KL(teacher || student); 1: reverse KL(student || teacher);
  /// in between: the alpha-skewed Jensen-Shannon divergence (0.5: JS).
  double alpha = 0.5;
  /// Importance-ratio clip c (§5): each token's loss is weighted by
  /// min(pi/pi_old, c), detached; 0 disables the weighting.
  double is_clip = 2.0;
};

/// PPO-style ratio clipping of a policy-gradient loss (§7), Verl's "vanilla".
struct PolicyClip {
  double low = 0.2;   ///< the ratio is clipped below at 1 - low
  double high = 0.2;  ///< and above at 1 + high
  double dual = 3.0;  ///< dual clip: for A < 0 the loss is at most -A * dual (> 1)
};

/// Messages name the option: "--alpha: must be in [0, 1]" etc.
Status ValidateSdpoOptions(const DistillOptions& d, const PolicyClip& p);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_SDPO_SDPO_OPTIONS_H_
