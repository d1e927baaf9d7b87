// Tests only: three layouts of four ranks that split a model every way the
// released tensors can be cut (pipeline stages; TP heads with EP experts;
// EP experts with ETP columns), for the tests that load or resume a model
// across layouts (train_session_test.cc, sharded_checkpoint_test.cc).
#ifndef KIMI_PLAN_RUNTIME_TRAIN_FOUR_RANK_LAYOUTS_TEST_UTIL_H_
#define KIMI_PLAN_RUNTIME_TRAIN_FOUR_RANK_LAYOUTS_TEST_UTIL_H_

#include <string>

#include "runtime/train/train_session.h"

namespace kp::runtime::testing {

struct NamedLayout {
  const char* name;
  ParallelLayout layout;
};

inline const NamedLayout kFourRankLayouts[] = {
    {"pp2_dp2", [] { ParallelLayout l; l.pp = 2, l.dp = 2; return l; }()},
    {"tp2_ep2", [] { ParallelLayout l; l.tp = 2, l.dp = 2, l.ep = 2; return l; }()},
    {"ep2_etp2", [] { ParallelLayout l; l.dp = 4, l.ep = 2, l.etp = 2; return l; }()},
};

/// The layout called `name`, or null.
inline const ParallelLayout* FourRankLayout(const std::string& name) {
  for (const NamedLayout& l : kFourRankLayouts)
    if (name == l.name) return &l.layout;
  return nullptr;
}

}  // namespace kp::runtime::testing

#endif  // KIMI_PLAN_RUNTIME_TRAIN_FOUR_RANK_LAYOUTS_TEST_UTIL_H_
