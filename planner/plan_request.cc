#include "planner/plan_request.h"

namespace kp {

const char* RecomputeName(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "?";
}

const char* LoraExpertsName(LoraExperts e) {
  return e == LoraExperts::kSharedOuter ? "shared-outer" : "per-expert";
}

}  // namespace kp
