// The Modal app file of a launch (docs/launcher.md shows one).
#ifndef KIMI_PLAN_LAUNCHER_MODAL_APP_H_
#define KIMI_PLAN_LAUNCHER_MODAL_APP_H_

#include <string>

#include "launcher/launch_spec.h"
#include "launcher/verl_overrides.h"

namespace kp {

/// A Python module for `modal run --detach`: `app = modal.App(...)`, an
/// image, a volume mounted at /cache, one function with
/// `@app.function(gpu="H200:8", timeout=..., volumes=...)` and
/// `@modal.experimental.clustered(size=N, rdma=True)` whose containers read
/// their rank and the cluster's addresses from
/// `modal.experimental.get_cluster_info()`, then either start the plan's
/// native ranks with the torchrun-style environment (engine native) or
/// form a Ray cluster, wait until all N nodes are alive and run Verl's
/// trainer on rank 0 (engine verl); and a local entrypoint. The module
/// compiles without the modal package installed. `program` is the
/// kimi-plan executable the native image copies in. Internal when a Verl
/// override key is missing from `keys`.
Result<std::string> ModalApp(const Launch& l, const VerlKeys& keys, const std::string& program);

/// The image a Modal job runs in unless --image names another.
std::string DefaultModalImage(LaunchEngine e);

}  // namespace kp

#endif  // KIMI_PLAN_LAUNCHER_MODAL_APP_H_
