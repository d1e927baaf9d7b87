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

const char* StatePrecisionName(StatePrecision p) { return p == StatePrecision::kFp32 ? "fp32" : "mixed"; }

const char* RecomputeMethodName(RecomputeMethod m) {
  return m == RecomputeMethod::kUniform ? "uniform" : "block";
}

Result<Recompute> ParseRecompute(const std::string& s, const std::string& field) {
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull})
    if (s == RecomputeName(r)) return r;
  return Status::InvalidArgument(field + ": must be none, selective or full, got \"" + s + "\"");
}

Result<RecomputeMethod> ParseRecomputeMethod(const std::string& s, const std::string& field) {
  for (RecomputeMethod m : {RecomputeMethod::kUniform, RecomputeMethod::kBlock})
    if (s == RecomputeMethodName(m)) return m;
  return Status::InvalidArgument(field + ": must be uniform or block, got \"" + s + "\"");
}

std::string RecomputeLabel(Recompute r, RecomputeMethod method, int layers) {
  if (r != Recompute::kFull || (method == RecomputeMethod::kUniform && layers == 1)) return RecomputeName(r);
  return std::string("full ") + RecomputeMethodName(method) + " " + std::to_string(layers);
}

std::string RecomputeLabel(const PlanRequest& r) {
  return RecomputeLabel(r.recompute, r.recompute_method, r.recompute_layers);
}

Recompute LayerRecompute(const PlanRequest& r, int index) {
  if (r.recompute != Recompute::kFull || r.recompute_method == RecomputeMethod::kUniform) return r.recompute;
  return index < r.recompute_layers ? Recompute::kFull : Recompute::kNone;
}

const char* LoraExpertsName(LoraExperts e) {
  return e == LoraExperts::kSharedOuter ? "shared-outer" : "per-expert";
}

}  // namespace kp
