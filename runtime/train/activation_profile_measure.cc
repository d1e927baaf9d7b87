#include "runtime/train/activation_profile_measure.h"

#include <algorithm>
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
};

Pass Measure(StageModelImpl& model, const ModelSpec& spec, int batch, int seq_len, const torch::Device& device) {
  const torch::Tensor tokens =
      torch::randint(spec.vocab, {batch, seq_len + 1}, torch::TensorOptions().dtype(torch::kLong).device(device));
  Pass p;
  ResetPeakMemory(device);
  double before = LiveBytes(device);
  // Each piece's growth is what it keeps for the backward plus the stream it
  // hands on, which the next piece's growth no longer counts.
  auto take = [&] {
    const double now = LiveBytes(device);
    const double grown = now - before;
    before = now;
    return grown;
  };
  ResidualStream stream = model.Embed(tokens.narrow(1, 0, seq_len));
  p.embedding = take();
  ForwardContext ctx;
  for (const auto& layer : model.layers()) {
    stream = layer->forward(std::move(stream), ctx);
    p.layers.push_back(take());
  }
  const torch::Tensor loss = model.HeadLoss(stream, tokens.narrow(1, 1, seq_len));
  p.head = take();
  p.forward_end = before;
  loss.backward();
  p.peak = PeakBytes(device);
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

}  // namespace

Result<ActivationTrace> MeasureActivationProfile(const ModelSpec& spec, const ModelOptions& options, int batch,
                                                 int seq_len, const std::string& device_name) {
  KP_ASSIGN_OR_RETURN(const torch::Device device, ParseDevice(device_name));
  // Before the model exists, so that its parameters are counted too.
  if (device.is_cpu()) InstallCpuMemoryCounter();
  KP_ASSIGN_OR_RETURN(std::shared_ptr<StageModelImpl> model, BuildModel(spec, options));
  model->to(device);
  model->train();
  ActivationTrace t;
  t.weights_bytes = LiveBytes(device);
  // The gradients a trainer keeps between steps exist before the forward, so
  // that the backward's figure is its working set alone, as the planner's
  // states already count the gradients.
  for (torch::Tensor& p : model->parameters()) p.mutable_grad() = torch::zeros_like(p);
  t.gradients_bytes = LiveBytes(device) - t.weights_bytes;
  const Pass one = Measure(*model, spec, batch, seq_len, device);
  const Pass two = Measure(*model, spec, 2 * batch, seq_len, device);
  const double tokens = static_cast<double>(batch) * seq_len;
  ActivationProfile& p = t.profile;
  p.model = spec.name;
  p.device = device.is_cuda() ? "cuda" : "cpu";
  p.dtype = DTypeName(options.dtype);
  p.seq_len = seq_len;
  p.tokens = batch * seq_len;
  p.embedding = one.embedding / tokens;
  for (size_t l = 0; l < one.layers.size(); ++l) {
    const auto [fixed, per_token] = FixedAndPerToken(one.layers[l], two.layers[l], tokens);
    p.layers_fixed.push_back(fixed);
    p.layers.push_back(per_token);
  }
  std::tie(p.head_fixed, p.head) = FixedAndPerToken(one.head, two.head, tokens);
  p.backward = one.backward / tokens;
  t.forward_end_bytes = one.forward_end;
  t.peak_bytes = one.peak;
  p.source = "kimi-plan profile: one forward and backward each of " + std::to_string(batch) + " and " +
             std::to_string(2 * batch) + " x " + std::to_string(seq_len) + " random tokens on " + device.str() +
             ", " + p.dtype + " activations, allocator live bytes around each piece";
  return t;
}

}  // namespace kp::runtime
