#include "runtime/sdpo/rollout.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "common/clock.h"

namespace kp::runtime {

namespace {

torch::Tensor MaskVocab(const torch::Tensor& logits, std::int64_t vocab_limit) {
  const std::int64_t v = logits.size(-1);
  if (vocab_limit <= 0 || vocab_limit >= v) return logits;
  return logits.index_fill(-1, torch::arange(vocab_limit, v, logits.options().dtype(torch::kLong)),
                           -std::numeric_limits<double>::infinity());
}

// Zeroes the probabilities outside the nucleus: in descending order (ties by
// lower id), a token stays while the mass strictly before it is < top_p.
torch::Tensor KeepNucleus(const torch::Tensor& probs, double top_p) {
  if (top_p >= 1.0) return probs;
  const auto [sorted, order] = torch::sort(probs, /*stable=*/true, /*dim=*/-1, /*descending=*/true);
  const torch::Tensor drop_sorted = (sorted.cumsum(-1) - sorted) >= top_p;
  const torch::Tensor drop = torch::zeros_like(drop_sorted).scatter(-1, order, drop_sorted);
  return probs.masked_fill(drop, 0.0);
}

bool IsStop(const SamplingOptions& o, std::int64_t id) {
  return std::find(o.stop_ids.begin(), o.stop_ids.end(), id) != o.stop_ids.end();
}

torch::Device DeviceOf(const StageModelImpl& model) {
  const auto params = model.parameters();
  return params.empty() ? torch::Device(torch::kCPU) : params.front().device();
}

}  // namespace

Status ValidateSamplingOptions(const SamplingOptions& o) {
  if (!std::isfinite(o.temperature) || o.temperature < 0)
    return Status::InvalidArgument("--temperature: must be >= 0 (0 is greedy), got " + std::to_string(o.temperature));
  if (!(o.top_p > 0 && o.top_p <= 1))
    return Status::InvalidArgument("--top-p: must be in (0, 1], got " + std::to_string(o.top_p));
  if (o.max_new_tokens < 1)
    return Status::InvalidArgument("--max-new-tokens: must be >= 1, got " + std::to_string(o.max_new_tokens));
  if (o.samples < 1) return Status::InvalidArgument("--samples: must be >= 1, got " + std::to_string(o.samples));
  if (o.vocab_limit < 0)
    return Status::InvalidArgument("vocab_limit: must be >= 0 (0: the whole vocabulary), got " +
                                   std::to_string(o.vocab_limit));
  return Status::Ok();
}

SampledTokens SampleToken(const torch::Tensor& logits, const SamplingOptions& options, at::Generator& generator) {
  if (options.temperature == 0) return SampleTokenAt(logits, options, torch::Tensor());
  const torch::Tensor u = torch::rand({logits.size(0)}, generator, torch::TensorOptions().dtype(torch::kDouble));
  return SampleTokenAt(logits, options, u.to(logits.device()));
}

SampledTokens SampleTokenAt(const torch::Tensor& logits, const SamplingOptions& options,
                            const torch::Tensor& uniforms) {
  const torch::Tensor z = MaskVocab(logits, options.vocab_limit);
  SampledTokens out;
  if (options.temperature == 0) {
    out.ids = z.argmax(-1);
    out.logprobs = torch::log_softmax(z, -1).gather(-1, out.ids.unsqueeze(-1)).squeeze(-1);
    return out;
  }
  const torch::Tensor logp = torch::log_softmax(z / options.temperature, -1);
  // The inverse of the nucleus' cumulative distribution at one uniform per
  // row: the first id whose cumulative mass exceeds u x the total (a
  // zero-probability id never does, since the sum does not grow there). All
  // on the device: no [rows, V] copy, and the host never waits for it.
  const torch::Tensor cdf = KeepNucleus(logp.exp(), options.top_p).to(torch::kDouble).cumsum(-1);
  const std::int64_t v = logits.size(-1);
  const torch::Tensor u = uniforms.to(torch::kDouble).unsqueeze(-1);
  out.ids = torch::searchsorted(cdf, u * cdf.narrow(-1, v - 1, 1), /*out_int32=*/false, /*right=*/true)
                .squeeze(-1)
                .clamp_max(v - 1);
  out.logprobs = logp.gather(-1, out.ids.unsqueeze(-1)).squeeze(-1);
  return out;
}

RolloutEngine::RolloutEngine(std::shared_ptr<StageModelImpl> model)
    : model_(std::move(model)), device_(DeviceOf(*model_)),
      steps_(DecodeGraph::Available(device_) && model_->DecodeStepStaysOnDevice(device_) ? DecodeSteps::kGraphs
                                                                                          : DecodeSteps::kGrowing) {}

Status RolloutEngine::set_decode_steps(DecodeSteps steps) {
  if (steps == DecodeSteps::kGraphs && !DecodeGraph::Available(device_))
    return Status::InvalidArgument("decode steps: CUDA graphs need a GPU and a CUDA LibTorch 2; the model is on " +
                                   device_.str());
  steps_ = steps;
  graphs_failed_.clear();
  return Status::Ok();
}

Status RolloutEngine::CheckPrompts(const std::vector<std::vector<std::int64_t>>& prompts) const {
  const std::int64_t vocab = model_->spec().vocab;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) return Status::InvalidArgument("prompt " + std::to_string(i) + " is empty");
    for (std::size_t t = 0; t < prompts[i].size(); ++t)
      if (prompts[i][t] < 0 || prompts[i][t] >= vocab)
        return Status::InvalidArgument("prompt " + std::to_string(i) + ": id " + std::to_string(prompts[i][t]) +
                                       " at position " + std::to_string(t) + " is outside the model's vocabulary of " +
                                       std::to_string(vocab));
  }
  return Status::Ok();
}

Result<std::vector<Sample>> RolloutEngine::Generate(const std::vector<std::vector<std::int64_t>>& prompts,
                                                    const SamplingOptions& options, std::uint64_t seed) {
  KP_RETURN_IF_ERROR(ValidateSamplingOptions(options));
  KP_RETURN_IF_ERROR(CheckPrompts(prompts));
  if (!model_->embedding() || !model_->head())
    return Status::InvalidArgument("rollout: the model must hold the embedding, every layer and the head");
  const Stopwatch watch;
  stats_ = {};
  stats_.graph_error = graphs_failed_;
  std::map<std::size_t, std::vector<int>> groups;  // prompt length -> prompt indices, in order
  for (std::size_t i = 0; i < prompts.size(); ++i) groups[prompts[i].size()].push_back(static_cast<int>(i));
  std::vector<Sample> out(prompts.size() * options.samples);
  for (std::size_t i = 0; i < out.size(); ++i) out[i].prompt = static_cast<int>(i / options.samples);
  at::Generator generator = at::detail::createCPUGenerator(seed);
  torch::NoGradGuard no_grad;
  model_->eval();
  try {
    for (const auto& [length, group] : groups) GenerateGroup(prompts, group, options, generator, out);
  } catch (const c10::Error& e) {
    return Status::Internal("rollout: " + std::string(e.what_without_backtrace()));
  }
  stats_.seconds = watch.Seconds();
  return out;
}

// The responses stay on the device, one [rows] tensor of ids and of
// log-probs a step; the host reads them, and so learns which rows stopped,
// once every kStopCheckEvery steps and at the end. A row that stopped in
// between is computed until then and its tokens after the stop are dropped
// when read: the host waits for the GPU once per kStopCheckEvery tokens, not
// once a token.
void RolloutEngine::GenerateGroup(const std::vector<std::vector<std::int64_t>>& prompts, const std::vector<int>& group,
                                  const SamplingOptions& options, at::Generator& generator, std::vector<Sample>& out) {
  const int n = options.samples;
  const auto length = static_cast<std::int64_t>(prompts[group.front()].size());
  torch::Tensor tokens = torch::empty({static_cast<std::int64_t>(group.size()), length}, torch::kLong);
  std::vector<Sample*> rows;  // the sample each batch row writes
  for (std::size_t g = 0; g < group.size(); ++g) {
    tokens[g].copy_(torch::tensor(prompts[group[g]], torch::kLong));
    for (int j = 0; j < n; ++j) rows.push_back(&out[static_cast<std::size_t>(group[g]) * n + j]);
  }
  DecodeCache cache;
  torch::Tensor logits = model_->ForwardIncremental(tokens.to(device_), cache).select(1, length - 1);
  ++stats_.forward_calls;
  cache.Repeat(n);
  logits = logits.repeat_interleave(n, 0);
  if (steps_ != DecodeSteps::kGrowing) {
    const Status fixed = cache.Fix(length + options.max_new_tokens);
    TORCH_CHECK(fixed.ok(), fixed.message());
  }
  // Every row's uniforms for the whole group, drawn at once and moved once:
  // a copy from pageable host memory waits for the device's queue, so one a
  // step would make the host wait for every step.
  torch::Tensor uniforms;
  if (options.temperature > 0)
    uniforms = torch::rand({static_cast<std::int64_t>(rows.size()), options.max_new_tokens}, generator,
                           torch::TensorOptions().dtype(torch::kDouble))
                   .to(device_);
  auto uniforms_at = [&](int step) { return uniforms.defined() ? uniforms.select(1, step) : torch::Tensor(); };
  std::unique_ptr<DecodeGraph> graph;
  bool warm = false;
  SampledTokens drawn = SampleTokenAt(logits, options, uniforms_at(0));
  std::vector<torch::Tensor> ids, logprobs;  // the steps since the last read, [rows] each
  for (int step = 0;; ++step) {
    ids.push_back(drawn.ids);
    logprobs.push_back(drawn.logprobs.to(torch::kFloat));
    const bool last = step + 1 == options.max_new_tokens;
    torch::Tensor next = drawn.ids;
    if (last || static_cast<int>(ids.size()) == kStopCheckEvery) {
      const std::vector<std::int64_t> keep = ReadSteps(torch::stack(ids, 1), torch::stack(logprobs, 1), options, rows);
      ids.clear(), logprobs.clear();
      if (keep.empty() || last) return;
      if (keep.size() < rows.size()) {
        const torch::Tensor index = torch::tensor(keep, torch::kLong).to(device_);
        cache.Select(index);  // new buffers: the graph of the old ones ends
        graph.reset();
        warm = false;
        next = next.index_select(0, index);
        if (uniforms.defined()) uniforms = uniforms.index_select(0, index);
        std::vector<Sample*> kept;
        for (const std::int64_t r : keep) kept.push_back(rows[static_cast<std::size_t>(r)]);
        rows = std::move(kept);
      }
    }
    drawn = Step(next, uniforms_at(step + 1), options, cache, graph, warm);
    ++stats_.forward_calls;
  }
}

SampledTokens RolloutEngine::Step(const torch::Tensor& next, const torch::Tensor& uniforms,
                                  const SamplingOptions& options, DecodeCache& cache,
                                  std::unique_ptr<DecodeGraph>& graph, bool& warm) {
  if (steps_ == DecodeSteps::kGraphs && !graph && warm && graphs_failed_.empty()) {
    Result<std::unique_ptr<DecodeGraph>> captured = DecodeGraph::Capture(*model_, cache, options, next.size(0));
    if (captured.ok()) {
      graph = std::move(captured).value();
      ++stats_.graph_captures;
    } else {
      // Eager steps from here on, in later calls too: a step that cannot be
      // captured once never can.
      graphs_failed_ = stats_.graph_error = captured.status().message();
    }
  }
  if (graph) {
    graph->ids().copy_(next);
    if (uniforms.defined()) graph->uniforms().copy_(uniforms);
    graph->Replay();
    ++stats_.graph_replays;
    // The graph's buffers are overwritten by the next replay.
    return {graph->ids().clone(), graph->logprobs().clone()};
  }
  const torch::Tensor logits = model_->ForwardIncremental(next.unsqueeze(1), cache).select(1, 0);
  warm = true;
  return SampleTokenAt(logits, options, uniforms);
}

std::vector<std::int64_t> RolloutEngine::ReadSteps(const torch::Tensor& ids, const torch::Tensor& logprobs,
                                                   const SamplingOptions& options, std::vector<Sample*>& rows) {
  ++stats_.host_reads;
  const torch::Tensor ids_cpu = ids.cpu(), logprobs_cpu = logprobs.cpu();
  const auto id = ids_cpu.accessor<std::int64_t, 2>();
  const auto lp = logprobs_cpu.accessor<float, 2>();
  std::vector<std::int64_t> keep;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    Sample& s = *rows[r];
    for (std::int64_t t = 0; t < id.size(1) && !s.stopped; ++t) {
      s.response.push_back(id[static_cast<std::int64_t>(r)][t]);
      s.logprobs.push_back(lp[static_cast<std::int64_t>(r)][t]);
      s.stopped = IsStop(options, s.response.back());
      ++stats_.generated_tokens;
    }
    if (!s.stopped) keep.push_back(static_cast<std::int64_t>(r));
  }
  return keep;
}

}  // namespace kp::runtime
