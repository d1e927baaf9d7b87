#include "planner/plan_json.h"

#include "specs/presets.h"

namespace kp {

using nlohmann::json;

const char* const kPlanSchema = "kimi-plan.plan/1";

json PlanToJson(const ParallelPlan& p) {
  return {{"tp", p.tp}, {"pp", p.pp}, {"vp", p.vp}, {"ep", p.ep}, {"etp", p.etp}, {"cp", p.cp}, {"dp", p.dp},
          {"rollout_tp", p.rollout_tp}, {"rollout_ep", p.rollout_ep}, {"rollout_dp", p.rollout_dp}};
}

json RecomputeMethodJson(const PlanRequest& r) {
  return r.recompute == Recompute::kFull ? json(RecomputeMethodName(r.recompute_method)) : json(nullptr);
}

json RecomputeLayersJson(const PlanRequest& r) {
  return r.recompute == Recompute::kFull ? json(r.recompute_layers) : json(nullptr);
}

json RequestToJson(const PlanRequest& r) {
  json lora = nullptr;
  if (r.mode == TrainMode::kLora)
    lora = {{"rank", r.lora.rank}, {"alpha", r.lora.alpha}, {"experts", LoraExpertsName(r.lora.experts)},
            {"attention", r.lora.attention}, {"routed_experts", r.lora.routed_experts},
            {"dense_ffn", r.lora.dense_ffn}, {"native_base", r.lora.native_base}};
  return {
      {"model", r.model.name}, {"gpu", r.gpu.name}, {"nodes", r.nodes}, {"gpus_per_node", r.gpus_per_node},
      {"mode", r.mode == TrainMode::kFull ? "full" : "lora"}, {"lora", lora},
      {"prompt_length", r.prompt_length}, {"response_length", r.response_length},
      {"global_batch", r.global_batch}, {"micro_batch", r.micro_batch}, {"rollout_n", r.rollout_n},
      {"schedule", ScheduleName(r.schedule)}, {"recompute", RecomputeName(r.recompute)},
      {"recompute_method", RecomputeMethodName(r.recompute_method)}, {"recompute_num_layers", r.recompute_layers},
      {"optimizer_sync", r.optimizer_sync ? json(OptimizerSyncName(*r.optimizer_sync)) : json(nullptr)},
      {"p2p", r.send_mode ? json(SendModeName(*r.send_mode)) : json(nullptr)},
      {"sequence_parallel", r.sequence_parallel}, {"distributed_optimizer", r.distributed_optimizer},
      {"dtype", PrecisionName(r.bf16, r.recipe.fp8)}, {"flash_attention", r.flash_attention},
      {"recipe", {{"fp8_param_gather", r.recipe.fp8_param_gather},
                  {"optimizer_moments", MomentsDtypeName(r.recipe.moments)},
                  {"grad_reduce_in_fp32", r.recipe.grad_reduce_in_fp32},
                  {"recompute_modules", RecomputeModulesList(r.recipe.recompute_modules)},
                  {"dispatcher", DispatcherName(r.recipe.dispatcher)},
                  {"a2a_overlap", r.recipe.a2a_overlap},
                  {"expert_activations", ExpertActivationsName(r.recipe.expert_activations)},
                  {"cuda_graphs", CudaGraphsName(r.recipe.cuda_graphs)}}},
      {"state_precision", StatePrecisionName(r.state_precision)},
      {"gradient_bucket_bytes", r.gradient_bucket.value()},
      {"activation_profile",
       r.activation_profile ? json::parse(ActivationProfileToJson(*r.activation_profile)) : json(nullptr)},
      {"placement", r.placement == Placement::kColocated ? "colocated" : "split"},
      {"rollout_gpus", r.rollout_gpus}, {"gpu_memory_utilization", r.gpu_memory_utilization},
      {"efficiency", {{"matmul", r.efficiency.matmul}, {"comm", r.efficiency.comm},
                      {"dp_overlap", r.efficiency.dp_overlap}, {"moe_imbalance", r.efficiency.moe_imbalance},
                      {"gemm_from_table", r.efficiency.gemm_from_table},
                      {"comm_from_table", r.efficiency.comm_from_table}}},
      {"calibration", r.calibration ? json::parse(CalibrationToJson(*r.calibration)) : json(nullptr)},
      {"search", r.search}, {"plan", PlanToJson(r.plan)}, {"top", r.top},
      {"layer_split", r.layer_split.ToString()},
      {"model_spec", json::parse(ModelSpecToJson(r.model))}, {"gpu_spec", json::parse(GpuSpecToJson(r.gpu))}};
}

Result<PlanRequest> RequestFromJson(const json& j) {
  // Written by RequestToJson of this schema; a malformed record is a bug or
  // a hand-edited database, reported as such.
  try {
    PlanRequest r;
    KP_ASSIGN_OR_RETURN(r.model, ParseModelSpec(j.at("model_spec").dump()));
    KP_ASSIGN_OR_RETURN(r.gpu, ParseGpuSpec(j.at("gpu_spec").dump()));
    r.nodes = j.at("nodes");
    r.gpus_per_node = j.at("gpus_per_node");
    r.mode = j.at("mode") == "lora" ? TrainMode::kLora : TrainMode::kFull;
    if (r.mode == TrainMode::kLora) {
      const json& l = j.at("lora");
      r.lora.rank = l.at("rank");
      r.lora.alpha = l.at("alpha");
      r.lora.experts = l.at("experts") == "per-expert" ? LoraExperts::kPerExpert : LoraExperts::kSharedOuter;
      r.lora.attention = l.at("attention");
      r.lora.routed_experts = l.at("routed_experts");
      r.lora.dense_ffn = l.at("dense_ffn");
      r.lora.native_base = l.at("native_base");
    }
    r.prompt_length = j.at("prompt_length");
    r.response_length = j.at("response_length");
    r.global_batch = j.at("global_batch");
    r.micro_batch = j.at("micro_batch");
    r.rollout_n = j.at("rollout_n");
    KP_ASSIGN_OR_RETURN(r.schedule, ParseSchedule(j.at("schedule")));
    // Absent in records written before the field existed: the default.
    if (j.contains("optimizer_sync") && !j["optimizer_sync"].is_null()) {
      KP_ASSIGN_OR_RETURN(r.optimizer_sync, ParseOptimizerSync(j["optimizer_sync"], "optimizer_sync"));
    }
    if (j.contains("p2p") && !j["p2p"].is_null()) {
      KP_ASSIGN_OR_RETURN(r.send_mode, ParseSendMode(j["p2p"], "p2p"));
    }
    const std::string rc = j.at("recompute");
    r.recompute = rc == "none" ? Recompute::kNone : rc == "full" ? Recompute::kFull : Recompute::kSelective;
    // Records from before the recompute methods recomputed fully as uniform 1.
    r.recompute_method =
        j.value("recompute_method", std::string("uniform")) == "block" ? RecomputeMethod::kBlock : RecomputeMethod::kUniform;
    r.recompute_layers = j.value("recompute_num_layers", 1);
    r.sequence_parallel = j.at("sequence_parallel");
    r.distributed_optimizer = j.at("distributed_optimizer");
    KP_ASSIGN_OR_RETURN(const PrecisionChoice precision, ParsePrecision(j.at("dtype"), r.gpu, "dtype"));
    r.bf16 = precision.bf16;
    r.recipe.fp8 = precision.fp8;
    // Records from before the recipe knobs used Megatron-LM's defaults.
    if (j.contains("recipe")) {
      const json& k = j.at("recipe");
      r.recipe.fp8_param_gather = k.at("fp8_param_gather");
      KP_ASSIGN_OR_RETURN(r.recipe.moments, ParseMomentsDtype(k.at("optimizer_moments"), "optimizer_moments"));
      r.recipe.grad_reduce_in_fp32 = k.at("grad_reduce_in_fp32");
      KP_ASSIGN_OR_RETURN(r.recipe.recompute_modules, ParseRecomputeModules(k.at("recompute_modules"), "recompute_modules"));
      KP_ASSIGN_OR_RETURN(r.recipe.dispatcher, ParseDispatcher(k.at("dispatcher"), "dispatcher"));
      r.recipe.a2a_overlap = k.at("a2a_overlap");
      KP_ASSIGN_OR_RETURN(r.recipe.expert_activations,
                          ParseExpertActivations(k.at("expert_activations"), "expert_activations"));
      KP_ASSIGN_OR_RETURN(r.recipe.cuda_graphs, ParseCudaGraphs(k.at("cuda_graphs"), "cuda_graphs"));
    }
    r.flash_attention = j.at("flash_attention");
    // Records from before these fields priced Megatron-LM's states and activations.
    r.state_precision =
        j.value("state_precision", std::string("mixed")) == "fp32" ? StatePrecision::kFp32 : StatePrecision::kMixed;
    r.gradient_bucket = Bytes(j.value("gradient_bucket_bytes", 0.0));
    if (j.contains("activation_profile") && !j.at("activation_profile").is_null()) {
      KP_ASSIGN_OR_RETURN(ActivationProfile a, ParseActivationProfile(j.at("activation_profile").dump()));
      r.activation_profile = std::make_shared<const ActivationProfile>(std::move(a));
    }
    r.placement = j.at("placement") == "split" ? Placement::kSplit : Placement::kColocated;
    r.rollout_gpus = j.at("rollout_gpus");
    r.gpu_memory_utilization = j.at("gpu_memory_utilization");
    const json& e = j.at("efficiency");
    r.efficiency = {e.at("matmul"), e.at("comm"), e.at("dp_overlap"), e.at("moe_imbalance"),
                    e.value("gemm_from_table", true), e.value("comm_from_table", true)};
    // Records before the calibration tables have none: the constants alone.
    if (j.contains("calibration") && !j.at("calibration").is_null()) {
      KP_ASSIGN_OR_RETURN(CalibrationTable t, ParseCalibration(j.at("calibration").dump()));
      r.calibration = std::make_shared<const CalibrationTable>(std::move(t));
    }
    r.search = j.at("search");
    r.top = j.value("top", r.top);
    // Records from before --layer-split were planned with the even split.
    KP_ASSIGN_OR_RETURN(r.layer_split, ParseLayerSplit(j.value("layer_split", std::string("even"))));
    const json& p = j.at("plan");
    r.plan = {p.at("tp"), p.at("pp"), p.at("vp"), p.at("ep"), p.at("etp"), p.at("cp"), p.at("dp"),
              p.at("rollout_tp"), p.at("rollout_ep"), p.at("rollout_dp")};
    return r;
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("request_json: ") + e.what());
  }
}

namespace {

json RoleToJson(const RoleMemory& m) {
  json details = json::object();
  for (const auto& [name, bytes] : m.details) details[name] = bytes.value();
  return {{"weights_bytes", m.weights.value()}, {"grads_bytes", m.grads.value()},
          {"optimizer_bytes", m.optimizer.value()}, {"activations_bytes", m.activations.value()},
          {"other_bytes", m.other.value()}, {"total_bytes", m.total().value()},
          {"capacity_bytes", m.capacity.value()}, {"pipeline_rank", m.rank}, {"fits", m.fits()},
          {"details", details}};
}

json BytesList(const std::vector<Bytes>& v) {
  json out = json::array();
  for (const Bytes& b : v) out.push_back(b.value());
  return out;
}

}  // namespace

json EvaluationToJson(const PlanRequest& req, const ParamCount& pc, const PlanEvaluation& e) {
  const StepTime& s = e.step;
  json phases = nullptr;
  if (req.placement == Placement::kColocated)
    phases = {{"train_bytes", e.memory.phases.train.value()},
              {"reference_bytes", e.memory.phases.reference.value()},
              {"rollout_bytes", e.memory.phases.rollout.value()},
              {"capacity_bytes", req.gpu.memory.value()}};
  return {
      {"schema", kPlanSchema},
      {"feasible", e.feasible()},
      {"violations", e.violations},
      {"plan", PlanToJson(e.plan)},
      {"schedule", ScheduleName(req.schedule)},
      {"recompute", RecomputeName(req.recompute)},
      {"recompute_method", RecomputeMethodJson(req)},
      {"recompute_num_layers", RecomputeLayersJson(req)},
      {"optimizer_sync", OptimizerSyncName(req.step_sync())},
      {"p2p", SendModeName(req.p2p())},
      {"split", e.split.ToString()},
      {"layer_split", e.layer_split.ToString()},
      {"layer_counts", LayerCounts(e.split)},
      {"model", {{"name", req.model.name}, {"total_params", pc.total}, {"active_params", pc.active}}},
      {"cluster", {{"gpu", req.gpu.name}, {"nodes", req.nodes}, {"gpus_per_node", req.gpus_per_node},
                   {"world", req.world()}, {"actor_gpus", req.actor_gpus()}}},
      {"memory", {{"actor", RoleToJson(e.memory.actor)},
                  {"actor_by_pipeline_rank_bytes", BytesList(e.memory.actor_by_rank)},
                  {"reference", RoleToJson(e.memory.reference)},
                  {"rollout", RoleToJson(e.memory.rollout)}}},
      {"phases", phases},
      {"rollout", {{"kv_bytes_per_sequence", e.memory.rollout_kv_per_sequence.value()},
                   {"concurrent_sequences_per_engine", e.memory.rollout_concurrency}}},
      {"step_time_s", s.total.value()},
      {"tokens_per_s_per_gpu", s.tokens_per_s_per_gpu},
      {"mfu", s.mfu},
      {"step", {{"microbatches", s.microbatches}, {"tokens_per_step", s.tokens_per_step},
                {"compute_s", s.compute.value()}, {"bubble_s", s.bubble.value()},
                {"tp_comm_s", s.tp_comm.value()}, {"ep_comm_s", s.ep_comm.value()},
                {"cp_comm_s", s.cp_comm.value()}, {"pp_comm_s", s.pp_comm.value()},
                {"dp_comm_s", s.dp_comm.value()}, {"optimizer_s", s.optimizer.value()},
                {"f_s", s.f.value()}, {"b_s", s.b.value()}, {"w_s", s.w.value()},
                {"pricing", PricingOf(req)}}},
  };
}

json NearestFitToJson(const std::optional<NearestFit>& n, const PlanRequest& req) {
  if (!n) return nullptr;
  return {{"nodes", n->nodes}, {"gpus", n->nodes * req.gpus_per_node}, {"changes", n->changes}, {"plan", PlanToJson(n->evaluation.plan)},
          {"step_time_s", n->evaluation.step.total.value()},
          {"tokens_per_s_per_gpu", n->evaluation.step.tokens_per_s_per_gpu},
          {"actor_total_bytes", n->evaluation.memory.actor.total().value()}};
}

}  // namespace kp
