// How the rollout samples (runtime/rollout.h), apart from the engine so that
// configurations (the CLI, runtime/sdpo_loop.h) need no LibTorch.
#ifndef KIMI_PLAN_RUNTIME_SDPO_SAMPLING_OPTIONS_H_
#define KIMI_PLAN_RUNTIME_SDPO_SAMPLING_OPTIONS_H_

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "runtime/tasks/tokenizer.h"

namespace kp::runtime {

struct SamplingOptions {
  double temperature = 1.0;  ///< >= 0; logits are divided by it; 0 means greedy (argmax)
  double top_p = 1.0;        ///< nucleus: the smallest set of most likely tokens whose mass >= top_p, in (0, 1]
  int max_new_tokens = 16;   ///< >= 1
  int samples = 1;           ///< n responses per prompt, >= 1
  /// A row ends after emitting one of these (it is kept in the response).
  std::vector<std::int64_t> stop_ids = {ByteTokenizer::kEos};
  /// > 0: ids >= vocab_limit are never sampled (the byte tokenizer uses 260
  /// ids of a larger vocabulary).
  std::int64_t vocab_limit = 0;
};

/// Messages name the flag: --temperature, --top-p, --max-new-tokens, --samples.
Status ValidateSamplingOptions(const SamplingOptions& o);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_SDPO_SAMPLING_OPTIONS_H_
