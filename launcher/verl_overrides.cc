#include "launcher/verl_overrides.h"

#include <sstream>

#include "launcher/quoting.h"

namespace kp {

namespace {

bool KeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == '+' || c == '-';
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

std::string CommitIn(const std::string& comment) {
  std::istringstream in(comment);
  std::string word, sha;
  in >> word >> sha;
  if (word != "commit" || sha.size() != 40) return "";
  for (char c : sha)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return "";
  return sha;
}

std::string Bool(bool b) { return b ? "True" : "False"; }

// A Hydra list of quoted strings: ["a","b"].
std::string HydraList(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ",\"" : "\"") + items[i] + "\"";
  return out + "]";
}

// A Hydra string value, quoted unless it is a plain path or name (so that
// "null", "True" or a path with '=' keep their meaning).
std::string HydraString(const std::string& s) {
  bool plain = !s.empty() && s != "null" && s != "True" && s != "False";
  for (char c : s) plain = plain && (KeyChar(c) || c == '/' || c == ':' || c == '~');
  if (plain) return s;
  std::string out = "'";
  for (char c : s) out += (c == '\'' || c == '\\') ? std::string("\\") + c : std::string(1, c);
  return out + "'";
}

class OverrideList {
 public:
  explicit OverrideList(const VerlKeys& keys) : keys_(keys) {}
  void Add(const std::string& key, const std::string& value) {
    if (missing_.empty() && !keys_.Contains(key)) missing_ = key;
    list_.push_back({key, value});
  }
  void Add(const std::string& key, long long value) { Add(key, std::to_string(value)); }
  Result<std::vector<VerlOverride>> Take() {
    if (!missing_.empty())
      return Status::Internal("verl override key \"" + missing_ + "\" is not in " + keys_.source() +
                              " (the Verl version the job installs has no such key)");
    return std::move(list_);
  }

 private:
  const VerlKeys& keys_;
  std::vector<VerlOverride> list_;
  std::string missing_;
};

void AddActor(const Launch& l, OverrideList& o) {
  const ParallelPlan& p = l.plan();
  const PlanRequest& r = l.request;
  const std::string m = "actor_rollout_ref.actor.megatron.";
  o.Add(m + "tensor_model_parallel_size", p.tp);
  o.Add(m + "pipeline_model_parallel_size", p.pp);
  // Megatron takes no virtual pipeline (null) rather than one stage per rank.
  o.Add(m + "virtual_pipeline_model_parallel_size", p.vp > 1 ? std::to_string(p.vp) : "null");
  o.Add(m + "expert_model_parallel_size", p.ep);
  o.Add(m + "expert_tensor_parallel_size", p.etp);
  o.Add(m + "context_parallel_size", p.cp);
  o.Add(m + "sequence_parallel", Bool(r.sequence_parallel));
  o.Add(m + "use_distributed_optimizer", Bool(r.distributed_optimizer));
  const std::string rc = m + "override_transformer_config.";
  o.Add(rc + "recompute_granularity", r.recompute == Recompute::kNone ? "null" : RecomputeName(r.recompute));
  if (r.recompute == Recompute::kFull) {
    o.Add(rc + "recompute_method", RecomputeMethodName(r.recompute_method));
    o.Add(rc + "recompute_num_layers", r.recompute_layers);
  }
  o.Add("actor_rollout_ref.actor.ppo_mini_batch_size", r.global_batch);
  o.Add("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", r.micro_batch);
}

// The planner's stage split, as Megatron's TransformerConfig fields. The
// fields are not declared in Verl's config, hence Hydra's '+'; the ref's
// override_transformer_config interpolates the actor's, so it builds the
// same split without keys of its own (docs/launcher.md).
void AddStageLayers(const MegatronStageLayers& m, OverrideList& o) {
  const std::string rc = "+actor_rollout_ref.actor.megatron.override_transformer_config.";
  if (m.first) o.Add(rc + "num_layers_in_first_pipeline_stage", *m.first);
  if (m.last) o.Add(rc + "num_layers_in_last_pipeline_stage", *m.last);
  if (m.layout) o.Add(rc + "pipeline_model_parallel_layout", HydraString(*m.layout));
}

// The recipe (planner/recipe.h) as the Megatron fields that set it; nothing
// where it is Megatron's default, so a dense bf16 plan's job is unchanged.
void AddRecipe(const Launch& l, OverrideList& o) {
  const RecipeOptions& k = l.request.recipe;
  const std::string rc = "actor_rollout_ref.actor.megatron.override_transformer_config.";
  if (l.request.recompute == Recompute::kSelective &&
      k.recompute_modules != std::vector<RecomputeModule>{RecomputeModule::kCoreAttn}) {
    std::vector<std::string> names;
    for (RecomputeModule m : k.recompute_modules) names.push_back(RecomputeModuleName(m));
    o.Add(rc + "recompute_modules", HydraList(names));
  }
  if (k.fp8 != Fp8Recipe::kNone) {
    o.Add("+" + rc + "fp8", "e4m3");
    // Megatron's names: tensorwise, blockwise, mxfp8.
    const char* name = k.fp8 == Fp8Recipe::kTensorwise ? "tensorwise" : k.fp8 == Fp8Recipe::kBlockwise ? "blockwise"
                                                                                                      : "mxfp8";
    o.Add("+" + rc + "fp8_recipe", name);
    if (k.fp8_param_gather) o.Add("+" + rc + "fp8_param", "True");
  }
  if (k.dispatcher != Dispatcher::kAllToAll) {
    o.Add("+" + rc + "moe_token_dispatcher_type", "flex");
    o.Add("+" + rc + "moe_flex_dispatcher_backend", DispatcherName(k.dispatcher));
  }
  if (k.cuda_graphs == CudaGraphs::kModules) {
    o.Add("+" + rc + "cuda_graph_impl", "transformer_engine");
    o.Add("+" + rc + "cuda_graph_scope", HydraList({"attn", "moe_router", "moe_preprocess"}));
  }
  if (k.a2a_overlap) {
    o.Add("+" + rc + "overlap_moe_expert_parallel_comm", "True");
    o.Add("+" + rc + "delay_wgrad_compute", "True");
  }
  if (k.moments == MomentsDtype::kBf16) {
    const std::string opt = "+actor_rollout_ref.actor.optim.override_optimizer_config.";
    o.Add(opt + "use_precision_aware_optimizer", "True");
    o.Add(opt + "exp_avg_dtype", "torch.bfloat16");
    o.Add(opt + "exp_avg_sq_dtype", "torch.bfloat16");
  }
  // Megatron-LM's own default is fp32 gradient reduction under bf16.
  if (!k.grad_reduce_in_fp32)
    o.Add("+actor_rollout_ref.actor.megatron.override_ddp_config.grad_reduce_in_fp32", "False");
}

void AddModel(const Launch& l, OverrideList& o) {
  const PlanRequest& r = l.request;
  o.Add("actor_rollout_ref.model.path", HydraString(l.model_path()));
  if (r.mode != TrainMode::kLora) return;
  // The Megatron engine builds its adapters from model.lora (Megatron-Bridge
  // PEFT); model.lora_rank / lora_alpha / target_modules are the FSDP path's.
  o.Add("actor_rollout_ref.model.lora.rank", r.lora.rank);
  o.Add("actor_rollout_ref.model.lora.alpha", FormatNumber(r.lora.alpha));
  o.Add("actor_rollout_ref.model.lora.target_modules", HydraList(MegatronLoraTargets(r)));
}

void AddRollout(const Launch& l, OverrideList& o) {
  const ParallelPlan& p = l.plan();
  const PlanRequest& r = l.request;
  const std::string ro = "actor_rollout_ref.rollout.";
  o.Add(ro + "name", "vllm");
  o.Add(ro + "tensor_model_parallel_size", p.rollout_tp);
  o.Add(ro + "expert_parallel_size", p.rollout_ep);
  o.Add(ro + "data_parallel_size", p.rollout_dp);
  o.Add(ro + "n", r.rollout_n);
  o.Add(ro + "gpu_memory_utilization", FormatNumber(r.gpu_memory_utilization));
}

void AddData(const Launch& l, OverrideList& o) {
  const PlanRequest& r = l.request;
  o.Add("algorithm.adv_estimator", "grpo");
  o.Add("data.train_files", HydraString(l.options.train_files));
  o.Add("data.val_files", HydraString(l.options.val_files));
  o.Add("data.train_batch_size", r.global_batch);
  o.Add("data.max_prompt_length", r.prompt_length);
  o.Add("data.max_response_length", r.response_length);
}

void AddTrainer(const Launch& l, OverrideList& o) {
  o.Add("trainer.nnodes", l.request.nodes);
  o.Add("trainer.n_gpus_per_node", l.request.gpus_per_node);
  o.Add("trainer.project_name", "kimi-plan");
  o.Add("trainer.experiment_name", HydraString(l.options.label));
  // Not the default's wandb, which needs credentials on every node: the
  // console, and the file logger (VERL_FILE_LOGGER_PATH, set by the job) that
  // `kimi-plan ingest` reads.
  o.Add("trainer.logger", HydraList({"console", "file"}));
}

// Seed 001: on-policy distillation with the k1 loss used as a
// policy-gradient reward (Verl recommends k1 for that mode and refuses to
// backpropagate k1 directly), task rewards kept, the teacher a vLLM pool
// of its own sized like the rollout engine.
void AddDistillation(const Launch& l, OverrideList& o) {
  if (l.teacher_nodes() == 0) return;
  const ParallelPlan& p = l.plan();
  const std::string d = "distillation.";
  const std::string t = d + "teacher_models.teacher_model.";
  o.Add(d + "enabled", "True");
  o.Add(d + "nnodes", l.teacher_nodes());
  o.Add(d + "n_gpus_per_node", l.request.gpus_per_node);
  o.Add(t + "model_path", HydraString(l.teacher_path()));
  o.Add(t + "inference.name", "vllm");
  o.Add(t + "inference.tensor_model_parallel_size", p.rollout_tp);
  o.Add(t + "inference.expert_parallel_size", p.rollout_ep);
  o.Add(t + "inference.data_parallel_size", p.rollout_dp);
  o.Add(d + "distillation_loss.loss_mode", "k1");
  o.Add(d + "distillation_loss.use_policy_gradient", "True");
  o.Add(d + "distillation_loss.use_task_rewards", "True");
}

}  // namespace

Result<VerlKeys> VerlKeys::Parse(const std::string& text, const std::string& source) {
  VerlKeys k;
  k.source_ = source;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos && k.commit_.empty()) k.commit_ = CommitIn(line.substr(hash + 1));
    const std::string key = Trim(line.substr(0, hash));
    if (key.empty()) continue;
    bool ok = key.front() != '.' && key.back() != '.';
    for (char c : key) ok = ok && KeyChar(c);
    if (!ok) return Status::InvalidArgument(source + ":" + std::to_string(n) + ": not a dotted key: \"" + key + "\"");
    k.keys_.insert(key);
  }
  if (k.keys_.empty()) return Status::InvalidArgument(source + ": no keys");
  return k;
}

std::vector<std::string> MegatronLoraTargets(const PlanRequest& r) {
  std::vector<std::string> t;
  const ModelSpec& m = r.model;
  if (r.lora.attention) {
    if (m.count(AttentionKind::kMla) > 0) {
      if (m.mla.q_lora_rank > 0) t.insert(t.end(), {"linear_q_down_proj", "linear_q_up_proj"});
      else t.push_back("linear_q_proj");
      t.insert(t.end(), {"linear_kv_down_proj", "linear_kv_up_proj"});
    } else {
      t.push_back("linear_qkv");
    }
    t.push_back("linear_proj");
  }
  if (r.lora.routed_experts && m.is_moe()) t.insert(t.end(), {"*.mlp.experts.*linear_fc1", "*.mlp.experts.*linear_fc2"});
  if (r.lora.dense_ffn) {
    t.insert(t.end(), {"*.mlp.linear_fc1", "*.mlp.linear_fc2"});
    if (m.moe.shared_experts > 0) t.insert(t.end(), {"*.mlp.shared_experts.linear_fc1", "*.mlp.shared_experts.linear_fc2"});
  }
  return t;
}

Result<std::vector<VerlOverride>> VerlOverrides(const Launch& l, const VerlKeys& keys) {
  OverrideList o(keys);
  o.Add("model_engine", "megatron");
  AddData(l, o);
  AddModel(l, o);
  AddActor(l, o);
  KP_ASSIGN_OR_RETURN(const MegatronStageLayers stage_layers, MegatronLayersOfPlan(l.request, l.evaluation));
  AddStageLayers(stage_layers, o);
  AddRecipe(l, o);
  AddRollout(l, o);
  AddDistillation(l, o);
  AddTrainer(l, o);
  // Join the Ray cluster the job started instead of starting a private one.
  o.Add("+ray_kwargs.ray_init.address", "auto");
  return o.Take();
}

}  // namespace kp
