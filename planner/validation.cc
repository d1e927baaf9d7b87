#include "planner/validation.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "common/limits.h"
#include "common/range.h"
#include "planner/planner.h"
#include "specs/json_fields.h"
#include "specs/param_count.h"

namespace kp {

using nlohmann::json;

namespace {

// A GPT of the Megatron-LM papers: learned positions, GeLU MLP, dropout,
// eager attention through the fused softmax.
Result<ModelSpec> GptModel(const json& m, const std::string& id, std::int64_t* seq_len) {
  ModelSpec s;
  s.name = id;
  Fields f(m, "model");
  KP_RETURN_IF_ERROR(f.Int("layers", &s.layers, 1, limits::kMaxLayers));
  KP_RETURN_IF_ERROR(f.Int("hidden", &s.hidden, 1, limits::kMaxHidden));
  KP_RETURN_IF_ERROR(f.Int("heads", &s.heads, 1, limits::kMaxHeads));
  s.kv_heads = s.heads;
  KP_RETURN_IF_ERROR(f.Int("kv_heads", &s.kv_heads, 1, limits::kMaxHeads, /*required=*/false));
  KP_RETURN_IF_ERROR(f.Int("vocab", &s.vocab, 1, limits::kMaxVocab));
  KP_RETURN_IF_ERROR(f.Int("ffn", &s.dense_ffn, 1, limits::kMaxFfn));
  KP_RETURN_IF_ERROR(f.Int("seq_len", seq_len, 1, limits::kMaxSequence));
  std::string activation = "gelu";
  KP_RETURN_IF_ERROR(f.Name("activation", &activation, /*required=*/false));
  if (activation != "gelu" && activation != "swiglu")
    return Status::InvalidArgument("model.activation: must be gelu or swiglu, got \"" + activation + "\"");
  s.dropout = true;
  s.tied_embeddings = true;
  KP_RETURN_IF_ERROR(f.Bool("dropout", &s.dropout));
  KP_RETURN_IF_ERROR(f.Bool("tied_embeddings", &s.tied_embeddings));
  KP_RETURN_IF_ERROR(f.NoUnknownKeys());
  if (s.hidden % s.heads != 0)
    return Status::InvalidArgument("model.heads: " + std::to_string(s.heads) + " does not divide hidden " +
                                   std::to_string(s.hidden));
  s.head_dim = s.hidden / s.heads;
  s.dense_layers = s.layers;
  s.gated_ffn = activation == "swiglu";
  s.attention = std::vector<AttentionKind>(s.layers, AttentionKind::kMha);
  return s;
}

// A measured figure: {"value": > 0, "kind": ..., and a note on how}.
Status ParseMeasured(const json& j, const std::string& name, std::optional<double>* value, std::string* kind) {
  if (!j.is_object()) return Status::InvalidArgument(name + ": must be an object {\"value\": ..., \"kind\": ...}");
  Fields f(j, name);
  double v = 0;
  KP_RETURN_IF_ERROR(f.Number("value", &v, 0, limits::kMaxSeconds));
  if (!(v > 0)) return Status::InvalidArgument(name + ".value: must be > 0, got " + ShowNumber(v));
  std::string k, note;
  KP_RETURN_IF_ERROR(f.Name("kind", &k));
  if (k != "measured" && k != "derived")
    return Status::InvalidArgument(name + ".kind: must be measured or derived, got \"" + k + "\"");
  KP_RETURN_IF_ERROR(f.Text("how", &note, /*required=*/false));
  KP_RETURN_IF_ERROR(f.Text("note", &note, /*required=*/false));
  KP_RETURN_IF_ERROR(f.NoUnknownKeys());
  *value = v;
  if (kind) *kind = k;
  return Status::Ok();
}

// A named preset (an MoE model of the released configs) with the fields a
// published run changes: its sequence length, MTP layers, padded vocabulary.
Result<ModelSpec> PresetModel(const json& m, const PresetCatalog& catalog, std::int64_t* seq_len) {
  Fields f(m, "model");
  std::string preset;
  KP_RETURN_IF_ERROR(f.Name("preset", &preset));
  KP_ASSIGN_OR_RETURN(ModelSpec s, catalog.Model(preset, "model.preset"));
  KP_RETURN_IF_ERROR(f.Int("seq_len", seq_len, 1, limits::kMaxSequence));
  KP_RETURN_IF_ERROR(f.Int("mtp_layers", &s.mtp_layers, 0, 16, /*required=*/false));
  KP_RETURN_IF_ERROR(f.Int("vocab", &s.vocab, 1, limits::kMaxVocab, /*required=*/false));
  KP_RETURN_IF_ERROR(f.NoUnknownKeys());
  return s;
}

Result<ValidationCase> ParseCase(const json& c, const PresetCatalog& catalog) {
  if (!c.is_object()) return Status::InvalidArgument("must be an object");
  ValidationCase v;
  Fields f(c, "");
  KP_RETURN_IF_ERROR(f.Name("id", &v.id));
  KP_RETURN_IF_ERROR(f.Text("source", &v.source));
  std::string ignored;
  KP_RETURN_IF_ERROR(f.Text("url", &ignored, /*required=*/false));
  KP_RETURN_IF_ERROR(f.Text("assumptions", &ignored, /*required=*/false));
  PlanRequest& r = v.request;
  KP_ASSIGN_OR_RETURN(const json* model, f.Object("model", /*required=*/true));
  std::int64_t seq_len = 0;
  if (model->contains("preset")) {
    KP_ASSIGN_OR_RETURN(r.model, PresetModel(*model, catalog, &seq_len));
  } else {
    KP_ASSIGN_OR_RETURN(r.model, GptModel(*model, v.id, &seq_len));
  }
  v.moe = r.model.is_moe();
  std::string gpu;
  KP_RETURN_IF_ERROR(f.Name("gpu", &gpu));
  KP_ASSIGN_OR_RETURN(r.gpu, catalog.Gpu(gpu, "gpu"));
  KP_ASSIGN_OR_RETURN(r.calibration, catalog.Calibration(r.gpu.name));
  std::int64_t gpus = 0, global_batch = 0, micro_batch = 0;
  KP_RETURN_IF_ERROR(f.Int("gpus", &gpus, 1, limits::kMaxClusterGpus));
  KP_RETURN_IF_ERROR(f.Int("global_batch", &global_batch, 1, limits::kMaxBatch));
  KP_RETURN_IF_ERROR(f.Int("micro_batch", &micro_batch, 1, limits::kMaxBatch));
  KP_RETURN_IF_ERROR(f.Int("tp", &r.plan.tp, 1, limits::kMaxClusterGpus));
  KP_RETURN_IF_ERROR(f.Int("pp", &r.plan.pp, 1, limits::kMaxClusterGpus));
  KP_RETURN_IF_ERROR(f.Int("vp", &r.plan.vp, 1, limits::kMaxLayers));
  KP_RETURN_IF_ERROR(f.Int("dp", &r.plan.dp, 1, limits::kMaxClusterGpus));
  KP_RETURN_IF_ERROR(f.Int("ep", &r.plan.ep, 1, limits::kMaxClusterGpus, /*required=*/false));
  KP_RETURN_IF_ERROR(f.Int("etp", &r.plan.etp, 1, limits::kMaxClusterGpus, /*required=*/false));
  KP_RETURN_IF_ERROR(f.Int("cp", &r.plan.cp, 1, limits::kMaxClusterGpus, /*required=*/false));
  const std::int64_t layout_gpus = static_cast<std::int64_t>(r.plan.tp) * r.plan.pp * r.plan.cp * r.plan.dp;
  if (layout_gpus != gpus)
    return Status::InvalidArgument("gpus: " + std::to_string(gpus) + " is not tp x pp x cp x dp = " +
                                   std::to_string(layout_gpus));
  r.gpus_per_node = r.gpu.gpus_per_node;
  r.nodes = static_cast<int>(std::max<std::int64_t>(1, gpus / r.gpus_per_node));
  if (gpus < r.gpus_per_node) r.gpus_per_node = static_cast<int>(gpus);
  if (static_cast<std::int64_t>(r.nodes) * r.gpus_per_node != gpus)
    return Status::InvalidArgument("gpus: " + std::to_string(gpus) + " is not whole nodes of " +
                                   std::to_string(r.gpu.gpus_per_node) + " " + r.gpu.name + " GPUs");
  r.prompt_length = seq_len;
  r.response_length = 0;
  r.global_batch = global_batch;
  r.micro_batch = micro_batch;
  std::string schedule, recompute, dtype, split;
  KP_RETURN_IF_ERROR(f.Name("schedule", &schedule));
  KP_ASSIGN_OR_RETURN(r.schedule, ParseSchedule(schedule, "schedule"));
  // Every case ran on Megatron-LM (the zero-bubble ones on the ZB authors'
  // fork, whose own schedules send asynchronously).
  r.send_mode = DefaultSendMode(r.schedule, /*megatron=*/true);
  KP_RETURN_IF_ERROR(f.Name("recompute", &recompute));
  KP_ASSIGN_OR_RETURN(r.recompute, ParseRecompute(recompute, "recompute"));
  std::string modules;
  KP_RETURN_IF_ERROR(f.Name("recompute_modules", &modules, /*required=*/false));
  if (!modules.empty()) {
    if (r.recompute != Recompute::kSelective)
      return Status::InvalidArgument("recompute_modules: needs recompute selective");
    KP_ASSIGN_OR_RETURN(r.recipe.recompute_modules, ParseRecomputeModules(modules, "recompute_modules"));
  }
  KP_RETURN_IF_ERROR(f.Bool("sequence_parallel", &r.sequence_parallel));
  KP_RETURN_IF_ERROR(f.Bool("flash_attention", &r.flash_attention));
  KP_RETURN_IF_ERROR(f.Name("dtype", &dtype));
  KP_ASSIGN_OR_RETURN(const PrecisionChoice precision, ParsePrecision(dtype, r.gpu, "dtype"));
  r.bf16 = precision.bf16;
  r.recipe.fp8 = precision.fp8;
  KP_RETURN_IF_ERROR(f.Bool("fp8_param_gather", &r.recipe.fp8_param_gather));
  std::string moments = "fp32", dispatcher = "alltoall", graphs = "none";
  KP_RETURN_IF_ERROR(f.Name("optimizer_moments", &moments, /*required=*/false));
  KP_ASSIGN_OR_RETURN(r.recipe.moments, ParseMomentsDtype(moments, "optimizer_moments"));
  KP_RETURN_IF_ERROR(f.Name("dispatcher", &dispatcher, /*required=*/false));
  KP_ASSIGN_OR_RETURN(r.recipe.dispatcher, ParseDispatcher(dispatcher, "dispatcher"));
  KP_RETURN_IF_ERROR(f.Bool("a2a_overlap", &r.recipe.a2a_overlap));
  KP_RETURN_IF_ERROR(f.Name("cuda_graphs", &graphs, /*required=*/false));
  KP_ASSIGN_OR_RETURN(r.recipe.cuda_graphs, ParseCudaGraphs(graphs, "cuda_graphs"));
  r.recipe.expert_activations = ExpertActivations::kMegatron;  // every published run is Megatron's
  KP_RETURN_IF_ERROR(f.Bool("grad_reduce_in_fp32", &r.recipe.grad_reduce_in_fp32));
  KP_RETURN_IF_ERROR(f.Bool("distributed_optimizer", &r.distributed_optimizer));
  KP_RETURN_IF_ERROR(f.Number("dp_overlap", &r.efficiency.dp_overlap, 0, 1));
  KP_RETURN_IF_ERROR(f.Number("moe_imbalance", &r.efficiency.moe_imbalance, 1, 1000, /*required=*/false));
  KP_RETURN_IF_ERROR(f.Name("layer_split", &split));
  Result<LayerSplit> rule = ParseLayerSplit(split);
  if (!rule.ok()) return Status::InvalidArgument("layer_split: " + rule.status().message());
  r.layer_split = *rule;
  KP_ASSIGN_OR_RETURN(const json* step, f.Object("step_time_s"));
  KP_ASSIGN_OR_RETURN(const json* memory, f.Object("memory_gb"));
  if (step) KP_RETURN_IF_ERROR(ParseMeasured(*step, "step_time_s", &v.step_time_s, &v.step_time_kind));
  if (memory) KP_RETURN_IF_ERROR(ParseMeasured(*memory, "memory_gb", &v.memory_gb, nullptr));
  if (!step && !memory) return Status::InvalidArgument("step_time_s: a case needs a measured step time or memory_gb");
  KP_RETURN_IF_ERROR(f.NoUnknownKeys());
  return v;
}

ErrorSummary Summarise(const std::vector<ValidationOutcome>& outcomes,
                       std::optional<double> (ValidationOutcome::*error)() const) {
  ErrorSummary s;
  double sum = 0;
  for (const ValidationOutcome& o : outcomes) {
    const std::optional<double> e = (o.*error)();
    if (!e) continue;
    ++s.cases;
    sum += std::abs(*e);
    if (std::abs(*e) > s.max) {
      s.max = std::abs(*e);
      s.worst = o.id;
    }
  }
  s.mean = s.cases ? sum / s.cases : 0;
  return s;
}

}  // namespace

Result<std::vector<ValidationCase>> ParseValidationCases(const std::string& text, const PresetCatalog& catalog) {
  KP_ASSIGN_OR_RETURN(const json j, ParseObject(text));
  Fields top(j, "");
  std::string schema, about;
  KP_RETURN_IF_ERROR(top.Name("schema", &schema));
  if (schema != "kimi-plan.validation/1")
    return Status::InvalidArgument("schema: must be \"kimi-plan.validation/1\", got \"" + schema + "\"");
  KP_RETURN_IF_ERROR(top.Text("about", &about, /*required=*/false));
  KP_ASSIGN_OR_RETURN(const json* cases, top.Array("cases", /*required=*/true));
  KP_RETURN_IF_ERROR(top.NoUnknownKeys());
  std::vector<ValidationCase> out;
  std::set<std::string> ids;
  for (std::size_t i = 0; i < cases->size(); ++i) {
    const json& c = cases->at(i);
    const std::string where = "cases[" + std::to_string(i) + "]";
    Result<ValidationCase> v = ParseCase(c, catalog);
    if (!v.ok()) return v.status().WithContext(where);
    if (!ids.insert(v->id).second) return Status::InvalidArgument(where + ": id \"" + v->id + "\" is used twice");
    out.push_back(std::move(*v));
  }
  return out;
}

std::optional<double> ValidationOutcome::StepError() const {
  if (!step_measured || !step_predicted) return std::nullopt;
  return *step_predicted / *step_measured - 1;
}

std::optional<double> ValidationOutcome::MemoryError() const {
  if (!memory_measured || !memory_predicted) return std::nullopt;
  return *memory_predicted / *memory_measured - 1;
}

std::vector<ValidationOutcome> RunValidation(const std::vector<ValidationCase>& cases) {
  std::vector<ValidationOutcome> out;
  for (const ValidationCase& c : cases) {
    ValidationOutcome o;
    o.id = c.id;
    o.moe = c.moe;
    o.step_measured = c.step_time_s;
    o.memory_measured = c.memory_gb;
    const ParamCount pc = CountParams(c.request.model);
    Result<PlanEvaluation> e = PlanFixed(c.request, pc);
    if (!e.ok()) {
      o.error = e.status().message();
    } else {
      o.step_predicted = e->step.total.value();
      o.memory_predicted = e->memory.actor.total().value() / kGB;
      o.fits = e->memory.actor.fits();
    }
    out.push_back(std::move(o));
  }
  return out;
}

std::vector<ValidationOutcome> OutcomesOfKind(const std::vector<ValidationOutcome>& outcomes, bool moe) {
  std::vector<ValidationOutcome> out;
  for (const ValidationOutcome& o : outcomes)
    if (o.moe == moe) out.push_back(o);
  return out;
}

ErrorSummary SummariseStep(const std::vector<ValidationOutcome>& o) { return Summarise(o, &ValidationOutcome::StepError); }
ErrorSummary SummariseMemory(const std::vector<ValidationOutcome>& o) {
  return Summarise(o, &ValidationOutcome::MemoryError);
}

}  // namespace kp
