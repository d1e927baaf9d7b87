#include "planner/validation.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "planner/planner.h"
#include "specs/param_count.h"

namespace kp {

using nlohmann::json;

namespace {

// A GPT of the Megatron-LM papers: learned positions, GeLU MLP, dropout,
// eager attention through the fused softmax.
ModelSpec GptModel(const json& m, const std::string& id) {
  ModelSpec s;
  s.name = id;
  s.layers = m.at("layers");
  s.hidden = m.at("hidden");
  s.heads = m.at("heads");
  s.head_dim = s.hidden / s.heads;
  s.kv_heads = m.value("kv_heads", s.heads);
  s.vocab = m.at("vocab");
  s.dense_layers = s.layers;
  s.dense_ffn = m.at("ffn");
  s.gated_ffn = m.value("activation", std::string("gelu")) == "swiglu";
  s.dropout = m.value("dropout", true);
  s.tied_embeddings = m.value("tied_embeddings", true);
  s.attention = std::vector<AttentionKind>(s.layers, AttentionKind::kMha);
  return s;
}

Result<Recompute> ParseRecompute(const std::string& r) {
  if (r == "none") return Recompute::kNone;
  if (r == "selective") return Recompute::kSelective;
  if (r == "full") return Recompute::kFull;
  return Status::InvalidArgument("recompute: must be none, selective or full");
}

Result<ValidationCase> ParseCase(const json& c, const PresetCatalog& catalog) {
  ValidationCase v;
  v.id = c.at("id");
  v.source = c.at("source");
  PlanRequest& r = v.request;
  r.model = GptModel(c.at("model"), v.id);
  KP_ASSIGN_OR_RETURN(r.gpu, catalog.Gpu(c.at("gpu")));
  KP_ASSIGN_OR_RETURN(r.calibration, catalog.Calibration(r.gpu.name));
  r.gpus_per_node = r.gpu.gpus_per_node;
  const int gpus = c.at("gpus");
  r.nodes = std::max(1, gpus / r.gpus_per_node);
  if (gpus < r.gpus_per_node) r.gpus_per_node = gpus;
  r.prompt_length = c.at("model").at("seq_len");
  r.response_length = 0;
  r.global_batch = c.at("global_batch");
  r.micro_batch = c.at("micro_batch");
  r.plan.tp = c.at("tp");
  r.plan.pp = c.at("pp");
  r.plan.vp = c.at("vp");
  r.plan.dp = c.at("dp");
  KP_ASSIGN_OR_RETURN(r.schedule, ParseSchedule(c.at("schedule")));
  // Every case ran on Megatron-LM (the zero-bubble ones on the ZB authors'
  // fork, whose own schedules send asynchronously).
  r.send_mode = DefaultSendMode(r.schedule, /*megatron=*/true);
  KP_ASSIGN_OR_RETURN(r.recompute, ParseRecompute(c.at("recompute")));
  r.sequence_parallel = c.at("sequence_parallel");
  r.flash_attention = c.at("flash_attention");
  r.bf16 = c.at("dtype") == "bf16";
  r.distributed_optimizer = c.at("distributed_optimizer");
  r.efficiency.dp_overlap = c.at("dp_overlap");
  KP_ASSIGN_OR_RETURN(r.layer_split, ParseLayerSplit(c.at("layer_split")));
  if (c.contains("step_time_s")) {
    v.step_time_s = c.at("step_time_s").at("value").get<double>();
    v.step_time_kind = c.at("step_time_s").at("kind");
  }
  if (c.contains("memory_gb")) v.memory_gb = c.at("memory_gb").at("value").get<double>();
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
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("cases") || !j.at("cases").is_array())
    return Status::InvalidArgument("validation cases: must be an object with a list \"cases\"");
  std::vector<ValidationCase> out;
  for (const json& c : j.at("cases")) {
    const std::string id = c.value("id", std::string("?"));
    try {
      Result<ValidationCase> v = ParseCase(c, catalog);
      if (!v.ok()) return v.status().WithContext("case " + id);
      out.push_back(std::move(*v));
    } catch (const json::exception& e) {
      return Status::InvalidArgument("case " + id + ": " + e.what());
    }
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
    o.step_measured = c.step_time_s;
    o.memory_measured = c.memory_gb;
    const ParamCount pc = CountParams(c.request.model);
    Result<PlanEvaluation> e = PlanFixed(c.request, pc);
    if (!e.ok()) {
      o.error = e.status().message();
    } else {
      o.step_predicted = e->step.total.value();
      o.memory_predicted = e->memory.actor.total().value() / kGB;
    }
    out.push_back(std::move(o));
  }
  return out;
}

ErrorSummary SummariseStep(const std::vector<ValidationOutcome>& o) { return Summarise(o, &ValidationOutcome::StepError); }
ErrorSummary SummariseMemory(const std::vector<ValidationOutcome>& o) {
  return Summarise(o, &ValidationOutcome::MemoryError);
}

}  // namespace kp
