#include "runtime/train/activation_profile_measure.h"

#include <algorithm>
#include <chrono>
#include <tuple>
#include <utility>

#include <torch/torch.h>

#include "runtime/comm/cpu_memory.h"
#include "runtime/comm/device.h"
#include "runtime/model/model.h"

namespace kp::runtime {

namespace {

// Bytes of tensor storage live on `device` once its queued work is done.
double LiveBytes(const torch::Device& device) {
  Synchronize(device);
  return AllocatedMemoryBytes(device);
}

double PeakBytes(const torch::Device& device) {
  Synchronize(device);
  return PeakMemoryBytes(device, RealFileSystem());
}

// What one forward and backward of `batch` sequences left allocated, piece
// by piece, in bytes for the whole micro-batch.
struct Pass {
  double embedding = 0, head = 0, backward = 0;
  std::vector<double> layers;
  double forward_end = 0, peak = 0;
  // Seconds each piece took, the device synchronised around it (the same
  // synchronisation the byte counts need).
  double embedding_s = 0, head_s = 0, backward_s = 0;
  std::vector<double> layers_s;
};

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

Pass Measure(StageModelImpl& model, const ModelSpec& spec, int batch, int seq_len, const torch::Device& device) {
  const torch::Tensor tokens =
      torch::randint(spec.vocab, {batch, seq_len + 1}, torch::TensorOptions().dtype(torch::kLong).device(device));
  Pass p;
  ResetPeakMemory(device);
  double before = LiveBytes(device);
  double started = Now();
  // Each piece's growth is what it keeps for the backward plus the stream it
  // hands on, which the next piece's growth no longer counts.
  auto take = [&](double* seconds) {
    const double now = LiveBytes(device);
    const double grown = now - before;
    before = now;
    const double t = Now();
    *seconds = t - started;
    started = t;
    return grown;
  };
  ResidualStream stream = model.Embed(tokens.narrow(1, 0, seq_len));
  p.embedding = take(&p.embedding_s);
  ForwardContext ctx;
  for (const auto& layer : model.layers()) {
    stream = layer->forward(std::move(stream), ctx);
    double s = 0;
    p.layers.push_back(take(&s));
    p.layers_s.push_back(s);
  }
  const torch::Tensor loss = model.HeadLoss(stream, tokens.narrow(1, 1, seq_len));
  p.head = take(&p.head_s);
  p.forward_end = before;
  loss.backward();
  p.peak = PeakBytes(device);
  p.backward_s = Now() - started;
  p.backward = p.peak - p.forward_end;
  return p;
}

// Splits what b and 2b sequences kept into a part per micro-batch and a part
// per token of the b-sequence micro-batch: at b the two add up to what was
// measured. A negative fixed part is the allocator's noise: none.
std::pair<double, double> FixedAndPerToken(double at_b, double at_2b, double tokens) {
  const double fixed = std::max(0.0, 2 * at_b - at_2b);
  return {fixed, (at_b - fixed) / tokens};
}

// A model built from `spec` and `options` on `device`, training, its
// gradients made (zero) as a trainer past its first step keeps them, so
// that the backward's figure is its working set alone (the planner's states
// count the gradients). The live bytes after each go to `weights` and
// `gradients` where given.
Result<std::shared_ptr<StageModelImpl>> TrainingModel(const ModelSpec& spec, const ModelOptions& options,
                                                      const LoraOptions& lora, const torch::Device& device,
                                                      double* weights = nullptr, double* gradients = nullptr) {
  KP_ASSIGN_OR_RETURN(std::shared_ptr<StageModelImpl> model, BuildModel(spec, options));
  if (lora.enabled()) model->EnableLora(lora, options.seed);
  model->to(device);
  model->train();
  const double built = LiveBytes(device);
  for (torch::Tensor& p : model->TrainableParameters()) p.mutable_grad() = torch::zeros_like(p);
  if (weights != nullptr) *weights = built;
  if (gradients != nullptr) *gradients = LiveBytes(device) - built;
  return model;
}

// The `batch` and 2 x `batch` passes, each after an unmeasured one of its
// size: a first pass warms the kernels and the allocator, and its times
// would count one-off work (autotuning, the first allocations).
std::pair<Pass, Pass> MeasureTwoSizes(StageModelImpl& model, const ModelSpec& spec, int batch, int seq_len,
                                      const torch::Device& device) {
  Measure(model, spec, batch, seq_len, device);
  Measure(model, spec, 2 * batch, seq_len, device);
  Pass one = Measure(model, spec, batch, seq_len, device);
  Pass two = Measure(model, spec, 2 * batch, seq_len, device);
  return {std::move(one), std::move(two)};
}

}  // namespace

Result<ActivationTrace> MeasureActivationProfile(const ModelSpec& spec, const ModelOptions& options, int batch,
                                                 int seq_len, const std::string& device_name, const LoraOptions& lora) {
  KP_ASSIGN_OR_RETURN(const torch::Device device, ParseDevice(device_name));
  // Before the model exists, so that its parameters are counted too.
  if (device.is_cpu()) InstallCpuMemoryCounter();
  ActivationTrace t;
  Pass one, two, recomputed_one, recomputed_two;
  {
    ModelOptions plain = options;
    plain.recompute_moe = plain.recompute_mlp = false;
    KP_ASSIGN_OR_RETURN(std::shared_ptr<StageModelImpl> model,
                        TrainingModel(spec, plain, lora, device, &t.weights_bytes, &t.gradients_bytes));
    std::tie(one, two) = MeasureTwoSizes(*model, spec, batch, seq_len, device);
  }
  {
    // Megatron's selective --recompute-modules moe and mlp: every layer's
    // channel mixer redone in the backward (one model at a time).
    ModelOptions recomputed = options;
    recomputed.recompute_moe = recomputed.recompute_mlp = true;
    KP_ASSIGN_OR_RETURN(std::shared_ptr<StageModelImpl> model, TrainingModel(spec, recomputed, lora, device));
    std::tie(recomputed_one, recomputed_two) = MeasureTwoSizes(*model, spec, batch, seq_len, device);
  }
  const double tokens = static_cast<double>(batch) * seq_len;
  ActivationProfile& p = t.profile;
  p.model = spec.name;
  p.device = device.is_cuda() ? "cuda" : "cpu";
  p.dtype = DTypeName(options.dtype);
  p.seq_len = seq_len;
  p.tokens = batch * seq_len;
  p.lora_rank = lora.enabled() ? lora.rank : 0;
  p.embedding = one.embedding / tokens;
  for (size_t l = 0; l < one.layers.size(); ++l) {
    const auto [fixed, per_token] = FixedAndPerToken(one.layers[l], two.layers[l], tokens);
    p.layers_fixed.push_back(fixed);
    p.layers.push_back(per_token);
  }
  std::tie(p.head_fixed, p.head) = FixedAndPerToken(one.head, two.head, tokens);
  p.backward = one.backward / tokens;
  for (size_t l = 0; l < recomputed_one.layers.size(); ++l)
    p.layers_ffn_recomputed.push_back(
        FixedAndPerToken(recomputed_one.layers[l], recomputed_two.layers[l], tokens).second);
  p.backward_ffn_recomputed = recomputed_one.backward / tokens;
  // Times through the two passes: fixed + per token, exact at both.
  auto line = [&](double at_b, double at_2b) {
    const double per_token = std::max(0.0, (at_2b - at_b) / tokens);
    return TimeLine{std::max(0.0, at_b - per_token * tokens), per_token};
  };
  PieceTimes times;
  times.embedding = line(one.embedding_s, two.embedding_s);
  for (size_t l = 0; l < one.layers_s.size(); ++l) times.layers.push_back(line(one.layers_s[l], two.layers_s[l]));
  times.head = line(one.head_s, two.head_s);
  times.backward = line(one.backward_s, two.backward_s);
  // Only a GPU's times price a GPU's step; a CPU run's would mislead.
  if (device.is_cuda()) p.time = times;
  t.forward_end_bytes = one.forward_end;
  t.peak_bytes = one.peak;
  p.source = "kimi-plan profile: one forward and backward each of " + std::to_string(batch) + " and " +
             std::to_string(2 * batch) + " x " + std::to_string(seq_len) + " random tokens on " + device.str() +
             ", " + p.dtype + " activations, allocator live bytes and seconds around each piece (after a warm-up "
             "pass of each size)";
  return t;
}

}  // namespace kp::runtime
