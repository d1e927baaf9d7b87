#include "cli/runtime_options.h"

#include <cstdlib>
#include <optional>
#include <sstream>

#include "common/limits.h"
#include "common/proc_file.h"
#include "common/table.h"
#include "runtime/comm/cpu_memory.h"
#include "runtime/comm/environment.h"
#include "runtime/model/runtime_config.h"
#include "specs/param_count.h"
#include "specs/presets.h"

namespace kp {

namespace {

template <typename T>
void Set(const po::variables_map& vm, const char* name, std::optional<T>* field) {
  if (vm.count(name)) *field = vm[name].as<T>();
}

}  // namespace

// The flags' ranges stop what no model has (common/limits.h); zero and the
// preset-relative bounds are ScaleModel's to refuse, with its messages.
void AddScaledModelOptions(po::options_description& desc) {
  desc.add_options()("model", po::value<std::string>()->default_value("kimi-k3-debug"), "model preset")
      ("model-file", po::value<std::string>(), "a model file in the preset format (instead of --model)")
      ("layers", IntFlag(0, limits::kMaxLayers), "scale the preset: decoder layers (at most the preset's)")
      ("hidden", IntFlag(0, limits::kMaxHidden), "scale the preset: hidden size (FFN, latent and LoRA-rank widths follow)")
      ("heads", IntFlag(0, limits::kMaxHeads), "scale the preset: attention heads")
      ("experts", IntFlag(0, limits::kMaxExperts), "scale the preset: routed experts (0: dense)")
      ("top-k", IntFlag(0, limits::kMaxExperts), "scale the preset: experts per token")
      ("vocab", IntFlag(0, limits::kMaxVocab), "scale the preset: vocabulary size")
      ("attn-res-block", IntFlag(0, limits::kMaxLayers), "scale the preset: attention-residual block size (0: plain residual)")
      ("dense-layers", IntFlag(0, limits::kMaxLayers), "scale the preset: leading dense-FFN layers");
}

Result<ModelSpec> ResolveScaledModel(const po::variables_map& vm, const CliEnv& env) {
  PresetCatalog catalog(env.fs, env.data.presets);
  ModelSpec preset;
  if (vm.count("model-file")) {
    KP_ASSIGN_OR_RETURN(preset, catalog.ModelFile(vm["model-file"].as<std::string>()));
  } else {
    KP_ASSIGN_OR_RETURN(preset, catalog.Model(vm.count("model") ? vm["model"].as<std::string>() : "kimi-k3-debug"));
  }
  runtime::ScaleFlags f;
  Set(vm, "layers", &f.layers);
  Set(vm, "hidden", &f.hidden);
  Set(vm, "heads", &f.heads);
  Set(vm, "experts", &f.experts);
  Set(vm, "top-k", &f.top_k);
  Set(vm, "vocab", &f.vocab);
  Set(vm, "attn-res-block", &f.attn_res_block);
  Set(vm, "dense-layers", &f.dense_layers);
  return runtime::ScaleModel(preset, f);
}

void AddTrainOptions(po::options_description& desc, const runtime::TrainConfig& d, bool steps_required,
                     int log_every) {
  auto* steps = IntFlag(1, limits::kMaxTrainSteps);
  if (!steps_required) steps->default_value(d.steps);
  desc.add_options()
      ("steps", steps, steps_required ? "train until this many optimizer steps in total (required)"
                                      : "optimizer steps in total")
      ("lr", NumberFlag(0, 10, /*min_open=*/true)->default_value(d.lr, FormatShortest(d.lr)), "peak learning rate")
      ("warmup", IntFlag(0, limits::kMaxTrainSteps)->default_value(d.warmup), "linear warmup steps")
      ("min-lr-ratio", NumberFlag(0, 1)->default_value(d.min_lr_ratio, FormatShortest(d.min_lr_ratio)),
       "the cosine ends at lr x this at --steps (1: constant)")
      ("grad-clip", NumberFlag(0, 1e9)->default_value(d.grad_clip, FormatShortest(d.grad_clip)), "max global gradient norm")
      ("kda-chunk", IntFlag(0, limits::kMaxSequence)->default_value(d.options.kda_chunk),
       "KDA scan chunk length (0: token-by-token recurrence)")
      ("fp8", po::value<std::string>(),
       "none | experts: the routed experts' products in FP8 as DeepSeek-V3 trains them (e4m3, 1x128 activation "
       "and 128x128 weight scales, fp32 accumulation: the planner's fp8-blockwise, on the experts alone; "
       "default none)")
      ("kda-math", po::value<std::string>(),
       "tensor-cores | fp32: KDA's chunk scan and its batched products as TF32 on tensor cores, the chunk-start "
       "states kept in bf16 (where this build's CUDA kernels run), or in fp32 on CUDA cores, the reference form; "
       "default tensor-cores")
      ("device", po::value<std::string>()->default_value(d.device),
       "cpu | cuda | cuda:N (ranks of run and sdpo take cuda:LOCAL_RANK)")
      ("seed", SeedFlag()->default_value(d.seed), "initialisation, data and sampling seed (0 to 2^63 - 1)")
      ("log-every", IntFlag(1, limits::kMaxTrainSteps)->default_value(log_every),
       "a progress line every this many steps");
}

runtime::C10dOptions C10dFromFlags(const po::variables_map& vm, const std::string& device, const CliEnv& env) {
  runtime::C10dOptions o;
  o.backend = vm["backend"].as<std::string>();
  o.device = device;
  o.timeout_s = vm["timeout-s"].as<int>();
  if (const char* ifname = env.getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr) o.gloo_interface = ifname;
  return o;
}

Status ReadTrainOptions(const po::variables_map& vm, runtime::TrainConfig* c) {
  if (!vm.count("steps")) return Status::InvalidArgument("--steps: required (the total optimizer steps to reach)");
  c->steps = vm["steps"].as<int>();
  c->lr = vm["lr"].as<double>();
  c->warmup = vm["warmup"].as<int>();
  c->min_lr_ratio = vm["min-lr-ratio"].as<double>();
  c->grad_clip = vm["grad-clip"].as<double>();
  c->options.kda_chunk = vm["kda-chunk"].as<int>();
  c->device = vm["device"].as<std::string>();
  c->seed = vm["seed"].as<std::uint64_t>();
  if (vm.count("kda-math")) {
    const std::string math = vm["kda-math"].as<std::string>();
    if (math != "tensor-cores" && math != "fp32")
      return Status::InvalidArgument("--kda-math: must be tensor-cores or fp32, got \"" + math + "\"");
    c->options.kda_tensor_cores = math == "tensor-cores";
  }
  if (vm.count("fp8")) {
    const std::string fp8 = vm["fp8"].as<std::string>();
    if (fp8 != "none" && fp8 != "experts")
      return Status::InvalidArgument("--fp8: must be none or experts, got \"" + fp8 + "\"");
    c->options.fp8_experts = fp8 == "experts";
  }
  return Status::Ok();
}

Status CheckTrainMemory(const runtime::TrainConfig& config, double parameters, const CliEnv& env) {
  if (config.device != "cpu") return Status::Ok();
  const ModelSpec& model = config.model;
  const double param_bytes = config.options.dtype == runtime::DType::kBf16 ? 2 : 4;
  const bool frozen_base = config.lora.enabled();
  const std::optional<double> available = ProcKilobytes(env.fs, "/proc/meminfo", "MemAvailable");
  if (!available) return Status::Ok();
  const double per_param = param_bytes * (frozen_base ? 1 : 4);
  const double need = parameters * per_param;
  if (need <= *available) return Status::Ok();
  std::ostringstream o;
  o.precision(3);
  o << "--model: " << model.name << " needs at least " << FormatGB(need) << " to train here (" << parameters
    << " parameters on this host's ranks x " << per_param << " bytes"
    << (frozen_base ? " of weights" : " of weights, gradients and AdamW") << "), more than the "
    << FormatGB(*available) << " this machine has available; scale it with --layers --hidden or take kimi-k3-debug";
  return Status::InvalidArgument(o.str());
}

Status CheckTrainMemory(const runtime::TrainConfig& config, const CliEnv& env) {
  return CheckTrainMemory(config, CountParams(config.model).total, env);
}

void PrepareDevice(const runtime::TrainConfig& config, const CliEnv& env) {
  const bool cuda = config.device.rfind("cuda", 0) == 0;
  if (config.deterministic && cuda)
    env.setenv(runtime::kDeterministicCublas.name, runtime::kDeterministicCublas.value);
  // Before the model exists, so that its parameters are counted.
  if (!cuda) runtime::InstallCpuMemoryCounter();
}

}  // namespace kp
