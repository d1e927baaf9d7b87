// Options shared by the runtime's commands (`train`, `run`): the model a
// runtime builds, a preset scaled by the shape flags. Built with LibTorch only.
#ifndef KIMI_PLAN_CLI_RUNTIME_OPTIONS_H_
#define KIMI_PLAN_CLI_RUNTIME_OPTIONS_H_

#include "cli/options.h"
#include "specs/model_spec.h"

namespace kp {

/// --model, --model-file and the shape flags that scale it (--layers
/// --hidden --heads --experts --top-k --vocab --attn-res-block --dense-layers).
void AddScaledModelOptions(po::options_description& desc);

/// --model (default kimi-k3-debug) or --model-file, scaled by --layers
/// --hidden --heads --experts --top-k --vocab --attn-res-block
/// --dense-layers where given.
Result<ModelSpec> ResolveScaledModel(const po::variables_map& vm, const CliEnv& env);

}  // namespace kp

#endif  // KIMI_PLAN_CLI_RUNTIME_OPTIONS_H_
