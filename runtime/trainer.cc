#include "runtime/trainer.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <nlohmann/json.hpp>

#ifdef KIMI_PLAN_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "common/clock.h"
#include "runtime/data.h"
#include "runtime/model.h"
#include "runtime/trainer_internal.h"

namespace kp::runtime {

namespace {

Status Positive(const char* flag, double v) {
  if (v > 0) return Status::Ok();
  std::ostringstream o;
  o << "--" << flag << ": must be positive, got " << v;
  return Status::InvalidArgument(o.str());
}

}  // namespace

// Matrices decay; vectors (norm weights, depth-read queries, gate biases,
// decay parameters) do not.
std::vector<torch::optim::OptimizerParamGroup> ParamGroups(const std::vector<torch::Tensor>& params,
                                                           const TrainConfig& c) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const torch::Tensor& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto options = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.adam_eps).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, options(c.weight_decay));
  groups.emplace_back(no_decay, options(0.0));
  return groups;
}

void UseDeterministicAlgorithms(torch::Device device) {
  if (device.is_cuda()) setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setBenchmarkCuDNN(false);
}

Result<torch::Device> ParseDevice(const std::string& name) {
  if (name == "cpu") return torch::Device(torch::kCPU);
  if (name.rfind("cuda", 0) == 0) {
    if (!torch::cuda::is_available())
      return Status::InvalidArgument("--device: " + name + " requested, but this LibTorch sees no CUDA device");
    try {
      return torch::Device(name);
    } catch (const c10::Error&) {
    }
  }
  return Status::InvalidArgument("--device: must be cpu, cuda or cuda:N, got \"" + name + "\"");
}

// Peak resident set size from /proc (the kernel's high-water mark).
double PeakRssBytes(const FileSystem& fs) {
  Result<std::string> status = fs.ReadFile("/proc/self/status");
  if (!status.ok()) return 0;
  std::istringstream in(*status);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) * 1024.0;
  }
  return 0;
}

namespace {

std::string ShapeNames(const torch::nn::Module& m) {
  std::ostringstream o;
  for (const auto& p : m.named_parameters()) o << p.key() << c10::str(p.value().sizes()) << ";";
  return o.str();
}

}  // namespace

double LearningRate(const TrainConfig& c, int step) {
  if (step < c.warmup) return c.lr * (step + 1) / c.warmup;
  const double span = std::max(1, c.steps - c.warmup);
  const double progress = std::min(1.0, (step - c.warmup) / span);
  const double floor = c.lr * c.min_lr_ratio;
  return floor + (c.lr - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

Status ValidateTrainConfig(const TrainConfig& c) {
  KP_RETURN_IF_ERROR(Positive("steps", c.steps));
  KP_RETURN_IF_ERROR(Positive("batch", c.batch));
  KP_RETURN_IF_ERROR(Positive("seq-len", c.seq_len));
  KP_RETURN_IF_ERROR(Positive("lr", c.lr));
  KP_RETURN_IF_ERROR(Positive("grad-clip", c.grad_clip));
  if (c.warmup < 0) return Status::InvalidArgument("--warmup: must be >= 0, got " + std::to_string(c.warmup));
  if (!(c.min_lr_ratio >= 0 && c.min_lr_ratio <= 1))
    return Status::InvalidArgument("--min-lr-ratio: must be in [0, 1], got " + std::to_string(c.min_lr_ratio));
  if (c.lora.rank < 0) return Status::InvalidArgument("--lora-rank: must be >= 0, got " + std::to_string(c.lora.rank));
  if (c.lora.enabled() && c.lora.alpha <= 0) return Status::InvalidArgument("--lora-alpha: must be positive");
  if (c.options.kda_chunk < 0) return Status::InvalidArgument("--kda-chunk: must be >= 0");
  return Status::Ok();
}

std::string TrainConfigJson(const TrainConfig& c) {
  nlohmann::json j = nlohmann::json::parse(ModelShapeJson(c.model, c.lora));
  j["model_name"] = c.model.name;
  j["dtype"] = DTypeName(c.options.dtype);
  j["activation_checkpointing"] = c.options.activation_checkpointing;
  j["kda_chunk"] = c.options.kda_chunk;
  j["route_scale"] = c.options.route_scale;
  j["data"] = {{"source", c.data.source}, {"token_bytes", c.data.token_bytes}};
  j["steps"] = c.steps;
  j["batch"] = c.batch;
  j["seq_len"] = c.seq_len;
  j["lr"] = c.lr;
  j["min_lr_ratio"] = c.min_lr_ratio;
  j["warmup"] = c.warmup;
  j["weight_decay"] = c.weight_decay;
  j["betas"] = {c.beta1, c.beta2};
  j["adam_eps"] = c.adam_eps;
  j["grad_clip"] = c.grad_clip;
  j["bias_update_rate"] = c.bias_update_rate;
  j["deterministic"] = c.deterministic;
  j["device"] = c.device;
  j["seed"] = c.seed;
  j["resume"] = c.resume;
  return j.dump();
}

struct TrainSession::Impl {
  TrainConfig config;
  const FileSystem* fs = nullptr;
  torch::Device device{torch::kCPU};
  std::shared_ptr<StageModelImpl> model;
  std::vector<torch::Tensor> trainable;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::unique_ptr<TokenSource> data;
  std::string shape_json;
  int step = 0;

  Status Resume(const std::string& path);
  Result<StepMetrics> Step();
  Status Save(const std::string& path) const;
  double PeakMemory() const;
};

Status TrainSession::Impl::Resume(const std::string& path) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path);
  } catch (const c10::Error&) {
    return Status::NotFound("--resume: cannot read a checkpoint at " + path);
  }
  c10::IValue shape;
  if (!archive.try_read("shape", shape) || !shape.isString())
    return Status::InvalidArgument("--resume: " + path + " is not a kimi-plan checkpoint");
  const std::string diff = FirstShapeDifference(shape.toStringRef(), shape_json);
  if (!diff.empty())
    return Status::InvalidArgument("--resume: " + path + " is a checkpoint of another shape (" + diff +
                                   "; checkpoint vs this run)");
  const std::string before = ShapeNames(*model);
  try {
    torch::serialize::InputArchive model_archive, optimizer_archive;
    archive.read("model", model_archive);
    archive.read("optimizer", optimizer_archive);
    model->load(model_archive);
    optimizer->load(optimizer_archive);
    torch::Tensor step_t, rng;
    archive.read("step", step_t);
    archive.read("rng", rng);
    step = static_cast<int>(step_t.item<std::int64_t>());
    torch::NoGradGuard no_grad;
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(rng);
  } catch (const c10::Error& e) {
    return Status::InvalidArgument("--resume: " + path + " does not fit this model: " + e.what_without_backtrace());
  }
  // load() replaces tensors wholesale; a changed shape would slip through.
  if (ShapeNames(*model) != before)
    return Status::InvalidArgument("--resume: " + path + " holds parameters of other shapes than this model's");
  model->to(device);
  if (step > config.steps)
    return Status::InvalidArgument("--steps: the checkpoint is already at step " + std::to_string(step) +
                                   ", beyond --steps " + std::to_string(config.steps));
  return Status::Ok();
}

Result<StepMetrics> TrainSession::Impl::Step() {
  Stopwatch watch;
  StepMetrics m;
  const int t = config.seq_len;
  std::vector<std::int64_t> tokens = data->Batch(step, config.batch, t + 1);
  const torch::Tensor batch =
      torch::from_blob(tokens.data(), {config.batch, t + 1}, torch::kLong).clone().to(device);
  m.lr = LearningRate(config, step);
  for (auto& group : optimizer->param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(m.lr);
  optimizer->zero_grad();
  ForwardContext ctx;
  ctx.record_router_load = true;
  const torch::Tensor logits = model->forward(batch.narrow(1, 0, t), ctx);
  const torch::Tensor loss = LanguageModelLoss(logits, batch.narrow(1, 1, t));
  loss.backward();
  m.grad_norm = torch::nn::utils::clip_grad_norm_(trainable, config.grad_clip);
  m.loss = loss.item<double>();
  if (!std::isfinite(m.loss) || !std::isfinite(m.grad_norm))
    return Status::Internal("step " + std::to_string(step + 1) + ": the loss or the gradient became non-finite (loss " +
                            std::to_string(m.loss) + ", grad norm " + std::to_string(m.grad_norm) +
                            "); lower --lr");
  optimizer->step();
  if (config.bias_update_rate > 0) model->UpdateRouterBiases(config.bias_update_rate);
  ++step;
  m.step = step;
  m.step_seconds = watch.Seconds();
  m.tokens_per_s = config.batch * t / std::max(m.step_seconds, 1e-9);
  m.peak_memory_bytes = PeakMemory();
  return m;
}

double TrainSession::Impl::PeakMemory() const {
#ifdef KIMI_PLAN_TORCH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index());
    return static_cast<double>(stats.allocated_bytes[0].peak);
  }
#endif
  return PeakRssBytes(*fs);
}

Status TrainSession::Impl::Save(const std::string& path) const {
  try {
    torch::serialize::OutputArchive archive, model_archive, optimizer_archive;
    model->save(model_archive);
    optimizer->save(optimizer_archive);
    archive.write("model", model_archive);
    archive.write("optimizer", optimizer_archive);
    archive.write("step", torch::tensor(static_cast<std::int64_t>(step)));
    archive.write("rng", at::detail::getDefaultCPUGenerator().get_state());
    archive.write("shape", c10::IValue(shape_json));
    archive.write("config", c10::IValue(TrainConfigJson(config)));
    // Written aside and renamed, so a run killed mid-save keeps the last
    // complete checkpoint.
    const std::string tmp = path + ".tmp";
    archive.save_to(tmp);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) return Status::IoError("--checkpoint-dir: cannot write " + path);
  } catch (const c10::Error& e) {
    return Status::IoError("--checkpoint-dir: cannot write " + path + ": " + e.what_without_backtrace());
  }
  return Status::Ok();
}

TrainSession::TrainSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TrainSession::~TrainSession() = default;

Result<std::unique_ptr<TrainSession>> TrainSession::Create(const TrainConfig& config, const FileSystem& fs) {
  KP_RETURN_IF_ERROR(ValidateTrainConfig(config));
  KP_RETURN_IF_ERROR(ValidateForRuntime(config.model));
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->config.options.seed = config.seed;
  impl->fs = &fs;
  KP_ASSIGN_OR_RETURN(impl->device, ParseDevice(config.device));
  if (config.data.source == "synthetic") {
    impl->data = std::make_unique<SyntheticCorpus>(config.model.vocab, config.seed ^ kDataSalt);
  } else {
    KP_ASSIGN_OR_RETURN(auto file, TokenFile::Open(fs, config.data.source, config.data.token_bytes,
                                                   config.model.vocab, config.seq_len + 1, config.seed ^ kDataSalt));
    impl->data = std::move(file);
  }
  try {
    if (config.deterministic) UseDeterministicAlgorithms(impl->device);
    torch::manual_seed(config.seed);
    KP_ASSIGN_OR_RETURN(impl->model, BuildModel(config.model, impl->config.options));
    if (config.lora.enabled()) impl->model->EnableLora(config.lora, config.seed);
    impl->model->to(impl->device);
    impl->model->train();
    impl->trainable = impl->model->TrainableParameters();
    impl->optimizer = std::make_unique<torch::optim::AdamW>(ParamGroups(impl->trainable, config),
                                                            torch::optim::AdamWOptions(config.lr));
    impl->shape_json = ModelShapeJson(config.model, config.lora);
    if (!config.resume.empty()) KP_RETURN_IF_ERROR(impl->Resume(config.resume));
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("setting up training: ") + e.what_without_backtrace());
  }
  return std::unique_ptr<TrainSession>(new TrainSession(std::move(impl)));
}

Result<StepMetrics> TrainSession::Step() {
  try {
    return impl_->Step();
  } catch (const c10::Error& e) {
    return Status::Internal("step " + std::to_string(impl_->step + 1) + ": " + e.what_without_backtrace());
  }
}

Status TrainSession::SaveCheckpoint(const std::string& path) const { return impl_->Save(path); }

Status TrainSession::SaveAdapters(const std::string& path) const { return runtime::SaveAdapters(*impl_->model, path); }

int TrainSession::step() const { return impl_->step; }

std::int64_t TrainSession::parameter_count() const { return CountElements(impl_->model->parameters()); }

std::int64_t TrainSession::trainable_count() const { return CountElements(impl_->trainable); }

std::string TrainSession::data_description() const { return impl_->data->Describe(); }

}  // namespace kp::runtime
