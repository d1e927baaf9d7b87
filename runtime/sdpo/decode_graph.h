// One decode step of the rollout (docs/runtime.md §16) captured as a CUDA
// graph: the model's forward of one token per row over a fixed DecodeCache,
// then the sampler, replayed with one launch where the eager step launches a
// kernel per operation (about a thousand for kimi-1b's 13 layers, which
// left the step launch-bound at 64 rows).
//
// Invariants: the graph reads its inputs from and writes its outputs to
// the same buffers on every replay (ids(): the row's last token, replaced
// by the sampled one; uniforms(): the draw's, filled by the caller before a
// replay; logprobs()), and it advances the cache's device position itself.
// It holds for as long as the cache's buffers do not move: a Select on the
// cache (rows dropped) ends it. Replays compute exactly what the eager step
// on the same fixed cache computes (the same kernels in the same order).
// Thread-safety: used from the one thread that drives its model.
#ifndef KIMI_PLAN_RUNTIME_SDPO_DECODE_GRAPH_H_
#define KIMI_PLAN_RUNTIME_SDPO_DECODE_GRAPH_H_

#include <memory>

#include <torch/torch.h>

#include "common/status.h"
#include "runtime/model/model.h"
#include "runtime/sdpo/sampling_options.h"

namespace kp::runtime {

class DecodeGraph {
 public:
  /// True where this build can capture graphs (a CUDA LibTorch 2) and
  /// `device` is a GPU.
  static bool Available(const torch::Device& device);

  /// Captures the step of `rows` rows: ids [rows] (long) in, the model over
  /// `cache` (fixed, those rows, on a GPU), the sampler with `options`, the
  /// sampled ids back into ids and their log-probs (fp32) out. Captures
  /// only: nothing runs and the cache is unchanged until Replay. The step
  /// should have run once eagerly on this cache first (libraries' lazy
  /// set-up cannot happen inside a capture). An error, with the capture
  /// ended, where a step's operation cannot be captured.
  static Result<std::unique_ptr<DecodeGraph>> Capture(StageModelImpl& model, DecodeCache& cache,
                                                      const SamplingOptions& options, std::int64_t rows);
  ~DecodeGraph();

  /// The rows' last tokens before a replay, the sampled ones after.
  torch::Tensor& ids() { return ids_; }
  /// The draw's uniforms [rows] (fp64) for the next replay (undefined when greedy).
  torch::Tensor& uniforms() { return uniforms_; }
  /// The sampled ids' log-probs [rows] (fp32) after a replay.
  const torch::Tensor& logprobs() const { return logprobs_; }
  /// Runs the captured step on the current stream.
  void Replay();

 private:
  struct Captured;
  DecodeGraph() = default;

  torch::Tensor ids_, uniforms_, logprobs_;
  std::unique_ptr<Captured> captured_;
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_SDPO_DECODE_GRAPH_H_
