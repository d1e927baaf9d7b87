// The precompiled header of kp_runtime and its tests: LibTorch's umbrella
// header costs ~20 s per translation unit on its own, so it is parsed once.
#ifndef KIMI_PLAN_RUNTIME_TORCH_PCH_H_
#define KIMI_PLAN_RUNTIME_TORCH_PCH_H_

#include <torch/torch.h>

#endif  // KIMI_PLAN_RUNTIME_TORCH_PCH_H_
