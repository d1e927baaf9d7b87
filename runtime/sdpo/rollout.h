// The SDPO loop's rollout engine: n sampled responses per prompt from the
// current policy, decoded with the model's KV cache (StageModelImpl::
// ForwardIncremental). Rules: docs/runtime.md §16.
//
// Invariants: prompts of equal length are decoded together, one prefill per
// prompt repeated to its n sample rows, so no batch is ever padded; the rows
// that emitted a stop id are dropped from the batch (DecodeCache::Select)
// when the host next reads the tokens, every kStopCheckEvery steps;
// randomness comes only from one CPU generator seeded by Generate's `seed`
// (one uniform per row and step, a group's [rows, max_new_tokens] drawn at
// its start and moved to the device once), so the same model, prompts, options and
// seed give the same samples on any device that computes the same
// probabilities (up to their cumulative sum's rounding).
// Device: the model's. Logits, temperature, masks, softmax, top-p, the draw
// and the responses stay on it; the host reads the sampled ids and
// log-probs, [rows] a step, once every kStopCheckEvery steps. On a GPU the
// steps run as CUDA graph replays over a fixed cache (DecodeSteps,
// decode_graph.h), which sample what the same steps run eagerly sample.
// Thread-safety: an engine and its model are used from one thread.
#ifndef KIMI_PLAN_RUNTIME_SDPO_ROLLOUT_H_
#define KIMI_PLAN_RUNTIME_SDPO_ROLLOUT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/status.h"
#include "runtime/model/model.h"
#include "runtime/sdpo/decode_graph.h"
#include "runtime/sdpo/sampling_options.h"
#include "runtime/tasks/tokenizer.h"

namespace kp::runtime {


struct Sample {
  int prompt = 0;                        ///< index into the prompts given to Generate
  std::vector<std::int64_t> response;    ///< sampled ids, the stop id included when one ended it
  std::vector<float> logprobs;           ///< log pi(y_t | ...) under the sampling distribution (after temperature, before top-p renormalisation)
  bool stopped = false;                  ///< ended by a stop id (else by max_new_tokens)
};

struct GenerationStats {
  std::int64_t generated_tokens = 0;  ///< sum of the response lengths
  double seconds = 0;                 ///< wall time of the whole Generate call
  std::int64_t forward_calls = 0;     ///< ForwardIncremental calls: one prefill per length group plus the steps
  /// Times the host read the sampled tokens back (and so waited for the
  /// device): per length group, one per kStopCheckEvery steps and one at its end.
  std::int64_t host_reads = 0;
  /// Steps run as a CUDA graph's replay (DecodeSteps::kGraphs), and the
  /// graphs captured for them: one per group, and one more each time rows
  /// are dropped.
  std::int64_t graph_replays = 0;
  std::int64_t graph_captures = 0;
  /// Why steps ran eagerly where graphs were asked for (empty: they did not).
  std::string graph_error;
};

/// How the rollout's decode steps run (docs/runtime.md §16).
enum class DecodeSteps {
  kGrowing,  ///< over a cache that grows with the tokens (any device)
  kFixed,    ///< over a fixed cache (DecodeCache::Fix), eagerly
  kGraphs,   ///< over a fixed cache, each step after a group's first a CUDA graph's replay (a GPU)
};

/// One token per row of `logits` [B, V] (any device, fp32 or fp64):
///   z = logits with ids >= vocab_limit set to -inf (when vocab_limit > 0),
///   logp = log_softmax(z / temperature)  (temperature 0: log_softmax(z), ids = argmax z, lowest id on ties),
///   ids drawn from exp(logp) restricted to the nucleus (the most likely ids, ties by lower id, up to and
///   including the first whose cumulative mass reaches top_p) and renormalised.
/// The draw is the inverse of the nucleus' cumulative distribution (fp64, on
/// logits' device) at one uniform per row from `generator` (a CPU
/// generator): the first id whose cumulative mass exceeds u x the nucleus'
/// total. Returns ids [B] (int64) and logp at ids [B] (logits' dtype), both
/// on logits' device: the sampled id's log-probability before the top-p
/// renormalisation. Nothing is read back to the host.
struct SampledTokens {
  torch::Tensor ids;
  torch::Tensor logprobs;
};
SampledTokens SampleToken(const torch::Tensor& logits, const SamplingOptions& options, at::Generator& generator);
/// SampleToken with the uniforms given: `uniforms` [B] in [0, 1) on logits'
/// device (undefined when greedy); the same ids as SampleToken drawing them.
SampledTokens SampleTokenAt(const torch::Tensor& logits, const SamplingOptions& options,
                            const torch::Tensor& uniforms);

class RolloutEngine {
 public:
  /// Steps between the host's reads of the sampled tokens (and stop checks).
  static constexpr int kStopCheckEvery = 8;
  /// Uses `model` (a whole model: embedding, all layers, head) for inference only (NoGradGuard, eval).
  explicit RolloutEngine(std::shared_ptr<StageModelImpl> model);
  /// prompts[i] are token ids (BOS ... SEP from ByteTokenizer::EncodePrompt). Returns prompts.size() * samples
  /// samples, sample j of prompt i at index i * samples + j. Prompts of equal length are decoded together in one
  /// batch (rows of all their samples), so a batch never needs padding; the KV cache is prefilled once per prompt and
  /// repeated to its n rows. Finished rows stop being computed. Deterministic given `seed`
  /// (a CPU torch::Generator seeded with it; the same seed gives the same samples).
  /// InvalidArgument for bad options, an empty prompt or an id outside the vocabulary; Internal for a LibTorch error.
  Result<std::vector<Sample>> Generate(const std::vector<std::vector<std::int64_t>>& prompts,
                                       const SamplingOptions& options, std::uint64_t seed);
  const GenerationStats& last_stats() const { return stats_; }
  StageModelImpl& model() { return *model_; }
  /// kGraphs by default where DecodeGraph::Available for the model's device
  /// and its steps read nothing back to the host (StageModelImpl::
  /// DecodeStepStaysOnDevice), else kGrowing; kGraphs where graphs are not
  /// available is InvalidArgument. Where a step cannot be captured the engine
  /// decodes eagerly from then on, and says why in GenerationStats::
  /// graph_error (until the next set_decode_steps). The three
  /// give the same samples up to the rounding of attending over a cache's
  /// whole capacity (kFixed and kGraphs: exactly the same).
  Status set_decode_steps(DecodeSteps steps);
  DecodeSteps decode_steps() const { return steps_; }

 private:
  // Decodes every sample of `group` (indices of prompts of one length) into `out`.
  void GenerateGroup(const std::vector<std::vector<std::int64_t>>& prompts, const std::vector<int>& group,
                     const SamplingOptions& options, at::Generator& generator, std::vector<Sample>& out);
  Status CheckPrompts(const std::vector<std::vector<std::int64_t>>& prompts) const;
  // Appends the steps' ids and log-probs ([rows, steps] on the device) to
  // the rows' samples up to each one's stop; the rows that go on.
  std::vector<std::int64_t> ReadSteps(const torch::Tensor& ids, const torch::Tensor& logprobs,
                                      const SamplingOptions& options, std::vector<Sample*>& rows);
  // The next token of each row after `next`: one step of the model and the
  // sampler, a replay of `graph` where graphs run (captured here when
  // `warm`: the eager step has run on the cache's present buffers).
  SampledTokens Step(const torch::Tensor& next, const torch::Tensor& uniforms, const SamplingOptions& options,
                     DecodeCache& cache, std::unique_ptr<DecodeGraph>& graph, bool& warm);

  std::shared_ptr<StageModelImpl> model_;
  torch::Device device_;
  DecodeSteps steps_;
  std::string graphs_failed_;  // why a capture failed; empty: none has
  GenerationStats stats_;
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_SDPO_ROLLOUT_H_
