#include "runtime/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/limits.h"
#include "runtime/comm/device.h"
#include "runtime/comm/in_process_communicator.h"
#include "runtime/model/model.h"
#include "runtime/train/pipeline_stage.h"
#include "runtime/train/trainer_internal.h"
#include "specs/json_fields.h"
#include "specs/presets.h"

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
  return ParamGroups(decay, no_decay, c);
}

std::vector<torch::optim::OptimizerParamGroup> ParamGroups(const std::vector<torch::Tensor>& decay,
                                                           const std::vector<torch::Tensor>& no_decay,
                                                           const TrainConfig& c) {
  auto options = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.adam_eps).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, options(c.weight_decay));
  groups.emplace_back(no_decay, options(0.0));
  return groups;
}

Result<std::unique_ptr<TokenSource>> OpenTokenSource(const TrainConfig& c, const FileSystem& fs) {
  if (c.data.source == "synthetic")
    return std::unique_ptr<TokenSource>(std::make_unique<SyntheticCorpus>(c.model.vocab, c.seed ^ kDataSalt));
  KP_ASSIGN_OR_RETURN(auto file, TokenFile::Open(fs, c.data.source, c.data.token_bytes, c.model.vocab,
                                                 c.seq_len + 1, c.seed ^ kDataSalt));
  return std::unique_ptr<TokenSource>(std::move(file));
}

std::unique_ptr<Communicator> PipelineOfOne() { return MakeInProcessCommunicator(MakeInProcessWorld(1), 0); }

StepMetrics StepMetricsOf(const PipelineStepResult& r, const TrainConfig& c, double peak_memory_bytes) {
  StepMetrics m;
  m.step = r.step;
  m.loss = r.loss;
  m.grad_norm = r.grad_norm;
  m.lr = r.lr;
  m.step_seconds = r.step_seconds;
  m.tokens_per_s = c.batch * c.seq_len / std::max(r.step_seconds, 1e-9);
  m.peak_memory_bytes = peak_memory_bytes;
  return m;
}

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
  if (c.options.checkpoint_group_layers < 1)
    return Status::InvalidArgument("--recompute-num-layers: must be >= 1, got " +
                                   std::to_string(c.options.checkpoint_group_layers));
  if (c.options.int4_expert_base && !c.lora.enabled())
    return Status::InvalidArgument("--lora-native-base: the INT4 base is the frozen base of LoRA; give --lora-rank");
  if (c.options.fp8_experts && !c.model.is_moe())
    return Status::InvalidArgument("--fp8: experts puts the routed experts in FP8; " + c.model.name +
                                   " has none (give --fp8 none)");
  if (c.options.fp8_experts && c.options.int4_expert_base)
    return Status::InvalidArgument("--fp8: the experts' base is INT4 (--lora-native-base); FP8 products are for "
                                   "trained experts (give one of them)");
  if (!c.init_from.empty() && !c.resume.empty())
    return Status::InvalidArgument("--init-from: not with --resume (the run's checkpoint holds its weights)");
  if (c.options.checkpoint_group_layers > 1 &&
      (!c.options.activation_checkpointing || c.options.checkpoint_first_layers > 0))
    return Status::InvalidArgument("--recompute-num-layers: groups of layers need --recompute full with "
                                   "--recompute-method uniform");
  return Status::Ok();
}

std::string TrainConfigJson(const TrainConfig& c) {
  nlohmann::json j = nlohmann::json::parse(ModelShapeJson(c.model, c.lora));
  j["model_name"] = c.model.name;
  j["dtype"] = DTypeName(c.options.dtype);
  j["weight_dtype"] = DTypeName(c.options.weight_dtype);
  j["activation_checkpointing"] = c.options.activation_checkpointing;
  j["checkpoint_first_layers"] = c.options.checkpoint_first_layers;
  j["distributed_optimizer"] = c.distributed_optimizer;
  // Written only when on, so configurations recorded before them read alike.
  if (c.options.recompute_moe) j["recompute_moe"] = true;
  if (c.options.recompute_mlp) j["recompute_mlp"] = true;
  if (c.options.recompute_shared_experts) j["recompute_shared_experts"] = true;
  if (c.options.recompute_layernorm) j["recompute_layernorm"] = true;
  if (c.options.recompute_moe_act) j["recompute_moe_act"] = true;
  if (c.options.recompute_mla_up_proj) j["recompute_mla_up_proj"] = true;
  if (c.options.int4_expert_base) j["int4_expert_base"] = true;
  if (c.options.fp8_experts) j["fp8_experts"] = "blockwise";
  if (!c.options.kda_tensor_cores) j["kda_math"] = "fp32";
  if (c.options.checkpoint_group_layers > 1) j["checkpoint_group_layers"] = c.options.checkpoint_group_layers;
  j["kda_chunk"] = c.options.kda_chunk;
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
  if (!c.init_from.empty()) j["init_from"] = c.init_from;  // written only when set, as the options above
  return j.dump();
}

namespace {

Status ReadModel(Fields& f, const nlohmann::json& j, const PresetCatalog& catalog, TrainConfig* c) {
  std::string name;
  KP_RETURN_IF_ERROR(f.String("model_name", &name));
  KP_ASSIGN_OR_RETURN(const ModelSpec preset, catalog.Model(name, f.Name("model_name")));
  // The shape's fields the scaling does not take: read for their types,
  // compared with the scaled model's as a whole below.
  std::int64_t ignored = 0;
  bool gated = false;
  for (const char* key : {"head_dim", "kv_heads", "dense_ffn"})
    KP_RETURN_IF_ERROR(f.Int(key, &ignored, 0, std::numeric_limits<std::int64_t>::max()));
  KP_RETURN_IF_ERROR(f.Bool("gated_ffn", &gated));
  KP_RETURN_IF_ERROR(f.Array("attention", /*required=*/true).status());
  for (const char* key : {"mla", "kda", "moe", "lora"}) KP_RETURN_IF_ERROR(f.Object(key, /*required=*/true).status());
  // Absent from configurations recorded before they were the model's.
  double eps = 0;
  KP_RETURN_IF_ERROR(f.Object("rope").status());
  KP_RETURN_IF_ERROR(f.Number("norm_eps", &eps, 0, 1, /*required=*/false));
  Fields moe(j.at("moe"), f.Name("moe")), lora(j.at("lora"), f.Name("lora"));
  ScaleFlags scale;
  int value = 0;
  const std::pair<const char*, std::optional<int> ScaleFlags::*> top[] = {
      {"layers", &ScaleFlags::layers}, {"hidden", &ScaleFlags::hidden}, {"heads", &ScaleFlags::heads},
      {"vocab", &ScaleFlags::vocab}, {"attn_res_block", &ScaleFlags::attn_res_block},
      {"dense_layers", &ScaleFlags::dense_layers}};
  for (const auto& [key, field] : top) {
    KP_RETURN_IF_ERROR(f.Int(key, &value, 0, std::numeric_limits<int>::max()));
    scale.*field = value;
  }
  KP_RETURN_IF_ERROR(moe.Int("num_experts", &value, 0, std::numeric_limits<int>::max()));
  scale.experts = value;
  KP_RETURN_IF_ERROR(moe.Int("top_k", &value, 0, std::numeric_limits<int>::max()));
  scale.top_k = value;
  KP_ASSIGN_OR_RETURN(c->model, ScaleModel(preset, scale));
  std::string experts;
  KP_RETURN_IF_ERROR(lora.Int("rank", &c->lora.rank, 0, std::numeric_limits<int>::max()));
  KP_RETURN_IF_ERROR(lora.Number("alpha", &c->lora.alpha, 0, 1e12));
  KP_RETURN_IF_ERROR(lora.String("experts", &experts));
  if (experts != "shared-outer" && experts != "per-expert")
    return Status::InvalidArgument(lora.Name("experts") + ": must be shared-outer or per-expert");
  c->lora.experts = experts == "per-expert" ? LoraExperts::kPerExpert : LoraExperts::kSharedOuter;
  nlohmann::json recorded = nlohmann::json::parse(ModelShapeJson(c->model, c->lora));
  // A field recorded before it existed keeps the preset's value.
  for (auto it = recorded.begin(); it != recorded.end(); ++it)
    if (j.contains(it.key())) it.value() = j.at(it.key());
  const std::string diff = FirstShapeDifference(recorded.dump(), ModelShapeJson(c->model, c->lora));
  if (!diff.empty())
    return Status::InvalidArgument(f.Name("model_name") + ": the recorded shape is not " + name +
                                   " scaled by flags (" + diff + "; recorded vs scaled)");
  return Status::Ok();
}

}  // namespace

Status ReadTrainConfig(Fields& f, const PresetCatalog& catalog, TrainConfig* c) {
  const nlohmann::json& j = f.object();
  KP_RETURN_IF_ERROR(ReadModel(f, j, catalog, c));
  std::string dtype;
  KP_RETURN_IF_ERROR(f.String("dtype", &dtype));
  KP_ASSIGN_OR_RETURN(c->options.dtype, ParseDType(dtype, f.Name("dtype")));
  std::string weight_dtype = "fp32";  // absent: fp32
  KP_RETURN_IF_ERROR(f.String("weight_dtype", &weight_dtype, /*required=*/false));
  KP_ASSIGN_OR_RETURN(c->options.weight_dtype, ParseDType(weight_dtype, f.Name("weight_dtype")));
  KP_RETURN_IF_ERROR(f.Bool("activation_checkpointing", &c->options.activation_checkpointing));
  KP_RETURN_IF_ERROR(f.Int("checkpoint_first_layers", &c->options.checkpoint_first_layers, 0, limits::kMaxLayers,
                           /*required=*/false));
  KP_RETURN_IF_ERROR(f.Bool("distributed_optimizer", &c->distributed_optimizer));  // absent: off
  KP_RETURN_IF_ERROR(f.Bool("recompute_moe", &c->options.recompute_moe));
  KP_RETURN_IF_ERROR(f.Bool("recompute_mlp", &c->options.recompute_mlp));
  KP_RETURN_IF_ERROR(f.Bool("recompute_shared_experts", &c->options.recompute_shared_experts));
  KP_RETURN_IF_ERROR(f.Bool("recompute_layernorm", &c->options.recompute_layernorm));
  KP_RETURN_IF_ERROR(f.Bool("recompute_moe_act", &c->options.recompute_moe_act));
  KP_RETURN_IF_ERROR(f.Bool("recompute_mla_up_proj", &c->options.recompute_mla_up_proj));
  KP_RETURN_IF_ERROR(f.Bool("int4_expert_base", &c->options.int4_expert_base));
  std::string fp8_experts = "none";  // absent: none
  KP_RETURN_IF_ERROR(f.String("fp8_experts", &fp8_experts, /*required=*/false));
  if (fp8_experts != "none" && fp8_experts != "blockwise")
    return Status::InvalidArgument(f.Name("fp8_experts") + ": must be blockwise, got \"" + fp8_experts + "\"");
  c->options.fp8_experts = fp8_experts == "blockwise";
  std::string kda_math = "tensor-cores";  // absent: the default
  KP_RETURN_IF_ERROR(f.String("kda_math", &kda_math, /*required=*/false));
  if (kda_math != "tensor-cores" && kda_math != "fp32")
    return Status::InvalidArgument(f.Name("kda_math") + ": must be tensor-cores or fp32, got \"" + kda_math + "\"");
  c->options.kda_tensor_cores = kda_math == "tensor-cores";
  KP_RETURN_IF_ERROR(f.Int("checkpoint_group_layers", &c->options.checkpoint_group_layers, 1, limits::kMaxLayers,
                           /*required=*/false));
  KP_RETURN_IF_ERROR(f.Int("kda_chunk", &c->options.kda_chunk, 0, 1 << 20));
  // Recorded at the top level before it was the model's moe.route_scale.
  KP_RETURN_IF_ERROR(f.Number("route_scale", &c->model.moe.route_scale, 1e-6, 1e6, /*required=*/false));
  KP_ASSIGN_OR_RETURN(const nlohmann::json* data, f.Object("data", /*required=*/true));
  Fields d(*data, f.Name("data"));
  KP_RETURN_IF_ERROR(d.String("source", &c->data.source));
  KP_RETURN_IF_ERROR(d.Int("token_bytes", &c->data.token_bytes, 2, 4));
  KP_RETURN_IF_ERROR(d.NoUnknownKeys());
  KP_RETURN_IF_ERROR(f.Int("steps", &c->steps, 1, std::numeric_limits<int>::max()));
  KP_RETURN_IF_ERROR(f.Int("batch", &c->batch, 1, std::numeric_limits<int>::max()));
  KP_RETURN_IF_ERROR(f.Int("seq_len", &c->seq_len, 1, std::numeric_limits<int>::max()));
  KP_RETURN_IF_ERROR(f.Number("lr", &c->lr, 0, 1e6));
  KP_RETURN_IF_ERROR(f.Number("min_lr_ratio", &c->min_lr_ratio, 0, 1));
  KP_RETURN_IF_ERROR(f.Int("warmup", &c->warmup, 0, std::numeric_limits<int>::max()));
  KP_RETURN_IF_ERROR(f.Number("weight_decay", &c->weight_decay, 0, 1e6));
  KP_ASSIGN_OR_RETURN(const nlohmann::json* betas, f.Array("betas", /*required=*/true));
  if (betas->size() != 2 || !(*betas)[0].is_number() || !(*betas)[1].is_number())
    return Status::InvalidArgument(f.Name("betas") + ": must be a list of two numbers");
  c->beta1 = (*betas)[0].get<double>();
  c->beta2 = (*betas)[1].get<double>();
  KP_RETURN_IF_ERROR(f.Number("adam_eps", &c->adam_eps, 0, 1));
  KP_RETURN_IF_ERROR(f.Number("grad_clip", &c->grad_clip, 0, 1e12));
  KP_RETURN_IF_ERROR(f.Number("bias_update_rate", &c->bias_update_rate, 0, 1));
  KP_RETURN_IF_ERROR(f.Bool("deterministic", &c->deterministic));
  KP_RETURN_IF_ERROR(f.String("device", &c->device));
  std::int64_t seed = 0;
  KP_RETURN_IF_ERROR(f.Int("seed", &seed, 0, std::numeric_limits<std::int64_t>::max()));
  c->seed = static_cast<std::uint64_t>(seed);
  c->options.seed = c->seed;
  KP_RETURN_IF_ERROR(f.String("init_from", &c->init_from, /*required=*/false));
  return f.String("resume", &c->resume);
}

}  // namespace kp::runtime
