#include "runtime/train/activation_profile_measure.h"

#include <torch/torch.h>

#include "runtime/comm/cpu_memory.h"
#include "runtime/comm/device.h"
#include "runtime/model/model.h"

namespace kp::runtime {

namespace {

void Synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index() < 0 ? 0 : device.index());
}

// Bytes of tensor storage live on `device` now.
double LiveBytes(const torch::Device& device) {
  Synchronize(device);
  return device.is_cuda() ? AllocatedMemoryBytes(device) : static_cast<double>(CpuAllocatedBytes());
}

double PeakBytes(const torch::Device& device) {
  Synchronize(device);
  return device.is_cuda() ? PeakMemoryBytes(device, RealFileSystem()) : static_cast<double>(CpuPeakBytes());
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
  const torch::Tensor tokens =
      torch::randint(spec.vocab, {batch, seq_len + 1}, torch::TensorOptions().dtype(torch::kLong).device(device));
  const double per_token = 1.0 / (static_cast<double>(batch) * seq_len);
  ActivationTrace t;
  ActivationProfile& p = t.profile;
  p.model = spec.name;
  p.device = device.is_cuda() ? "cuda" : "cpu";
  p.dtype = DTypeName(options.dtype);
  p.tokens = batch * seq_len;
  t.weights_bytes = LiveBytes(device);
  // The gradients a trainer keeps between steps exist before the forward, so
  // that the backward's figure is its working set alone, as the planner's
  // states already count the gradients.
  for (torch::Tensor& p : model->parameters()) p.mutable_grad() = torch::zeros_like(p);
  t.gradients_bytes = LiveBytes(device) - t.weights_bytes;
  ResetPeakMemory(device);
  double before = t.weights_bytes + t.gradients_bytes;
  // Each piece's growth is what it keeps for the backward plus the stream it
  // hands on, which the next piece's growth no longer counts.
  auto take = [&] {
    const double now = LiveBytes(device);
    const double grown = (now - before) * per_token;
    before = now;
    return grown;
  };
  ResidualStream stream = model->Embed(tokens.narrow(1, 0, seq_len));
  p.embedding = take();
  ForwardContext ctx;
  for (const auto& layer : model->layers()) {
    stream = layer->forward(std::move(stream), ctx);
    p.layers.push_back(take());
  }
  const torch::Tensor loss = model->HeadLoss(stream, tokens.narrow(1, 1, seq_len));
  p.head = take();
  t.forward_end_bytes = before;
  loss.backward();
  t.peak_bytes = PeakBytes(device);
  p.backward = (t.peak_bytes - t.forward_end_bytes) * per_token;
  p.source = "kimi-plan profile: one forward and backward of " + std::to_string(batch) + " x " +
             std::to_string(seq_len) + " random tokens on " + device.str() + ", " + p.dtype +
             " activations, allocator live bytes around each piece";
  return t;
}

}  // namespace kp::runtime
