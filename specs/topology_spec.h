// A named starting topology (seed 000/001): the cluster, the actor's and the
// rollout engine's parallel sizes, and the training mode. `kimi-plan plan
// --preset NAME` evaluates exactly this.
#ifndef KIMI_PLAN_SPECS_TOPOLOGY_SPEC_H_
#define KIMI_PLAN_SPECS_TOPOLOGY_SPEC_H_

#include <string>

namespace kp {

struct TopologySpec {
  std::string name;
  std::string model;       ///< model preset name
  std::string gpu;         ///< GPU preset name
  int nodes = 0;
  int gpus_per_node = 0;
  std::string mode;        ///< "full" or "lora"
  int lora_rank = 0;
  int actor_tp = 1, actor_pp = 1, actor_ep = 1, actor_etp = 1, actor_cp = 1;
  int rollout_tp = 1, rollout_ep = 1, rollout_n = 1;
  int prompt_length = 0, response_length = 0;
  std::string use;         ///< the seed's one-line purpose
};

}  // namespace kp

#endif  // KIMI_PLAN_SPECS_TOPOLOGY_SPEC_H_
