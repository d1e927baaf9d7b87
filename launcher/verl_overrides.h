// The plan as Verl's command line: Hydra overrides for
// `python3 -m verl.trainer.main_ppo`, checked against the key list of the
// Verl version the job installs (launcher/verl_keys.txt; its header names
// the repository, commit and file the keys come from).
#ifndef KIMI_PLAN_LAUNCHER_VERL_OVERRIDES_H_
#define KIMI_PLAN_LAUNCHER_VERL_OVERRIDES_H_

#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "launcher/launch_spec.h"

namespace kp {

/// The keys a generated job may override. One key per line; '#' starts a
/// comment; a key spelled with a leading '+' is one Hydra must append.
class VerlKeys {
 public:
  /// Parses the list; InvalidArgument naming `source` and the line number
  /// for a line that is not one key.
  static Result<VerlKeys> Parse(const std::string& text, const std::string& source);
  bool Contains(const std::string& key) const { return keys_.count(key) > 0; }
  std::size_t size() const { return keys_.size(); }
  /// The Verl commit the header names ("commit <40 hex digits>"), or empty.
  const std::string& commit() const { return commit_; }
  /// Where the list was read from (Parse's `source`), for messages.
  const std::string& source() const { return source_; }

 private:
  std::set<std::string> keys_;
  std::string commit_;
  std::string source_;
};

/// One override as Verl's command line takes it: key=value, the value in
/// Hydra's syntax (null, True, a number, a string, ["a","b"]).
struct VerlOverride {
  std::string key;
  std::string value;
  std::string Text() const { return key + "=" + value; }
};

/// The overrides that run the plan under Verl (docs/launcher.md lists them):
/// the Megatron engine with the actor's TP/PP/VP/EP/ETP/CP and the layers of
/// its first and last pipeline stage where the plan's split needs them
/// (MegatronLayersOfPlan; its InvalidArgument when Megatron cannot build
/// the split), the vLLM
/// rollout's TP/EP/DP, LoRA, the workload, the cluster, on-policy
/// distillation with the k1 policy-gradient loss against the self-teacher
/// pool, and the Ray cluster the job started. Internal naming the key when
/// one is missing from `keys`, so a Verl upgrade that renames a key fails
/// here rather than on the cluster.
Result<std::vector<VerlOverride>> VerlOverrides(const Launch& l, const VerlKeys& keys);

/// Megatron-Bridge LoRA target modules for the plan's LoRA targets:
/// MLA or fused-QKV attention projections, routed experts, dense FFNs and
/// shared experts (wildcards as megatron.bridge matches them).
std::vector<std::string> MegatronLoraTargets(const PlanRequest& r);

/// The Python module Verl's trainer runs as.
inline constexpr const char* kVerlTrainerModule = "verl.trainer.main_ppo";

}  // namespace kp

#endif  // KIMI_PLAN_LAUNCHER_VERL_OVERRIDES_H_
