#include "planner/plan_json.h"

namespace kp {

using nlohmann::json;

const char* const kPlanSchema = "kimi-plan.plan/1";

json PlanToJson(const ParallelPlan& p) {
  return {{"tp", p.tp}, {"pp", p.pp}, {"vp", p.vp}, {"ep", p.ep}, {"etp", p.etp}, {"cp", p.cp}, {"dp", p.dp},
          {"rollout_tp", p.rollout_tp}, {"rollout_ep", p.rollout_ep}, {"rollout_dp", p.rollout_dp}};
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
      {"sequence_parallel", r.sequence_parallel}, {"distributed_optimizer", r.distributed_optimizer},
      {"dtype", r.bf16 ? "bf16" : "fp16"}, {"flash_attention", r.flash_attention},
      {"placement", r.placement == Placement::kColocated ? "colocated" : "split"},
      {"rollout_gpus", r.rollout_gpus}, {"gpu_memory_utilization", r.gpu_memory_utilization},
      {"efficiency", {{"matmul", r.efficiency.matmul}, {"comm", r.efficiency.comm},
                      {"dp_overlap", r.efficiency.dp_overlap}, {"moe_imbalance", r.efficiency.moe_imbalance}}},
      {"search", r.search}, {"plan", PlanToJson(r.plan)}};
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
      {"split", e.split.ToString()},
      {"model", {{"name", req.model.name}, {"total_params", pc.total}, {"active_params", pc.active}}},
      {"cluster", {{"gpu", req.gpu.name}, {"nodes", req.nodes}, {"gpus_per_node", req.gpus_per_node},
                   {"world", req.world()}, {"actor_gpus", req.actor_gpus()}}},
      {"memory", {{"actor", RoleToJson(e.memory.actor)},
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
                {"f_s", s.f.value()}, {"b_s", s.b.value()}, {"w_s", s.w.value()}}},
  };
}

json SearchToJson(const SearchResult& s) {
  return {{"evaluated", s.evaluated}, {"feasible", s.feasible}, {"seconds", s.seconds}};
}

json NearestFitToJson(const std::optional<NearestFit>& n, const PlanRequest& req) {
  if (!n) return nullptr;
  return {{"nodes", n->nodes}, {"gpus", n->nodes * req.gpus_per_node}, {"changes", n->changes}, {"plan", PlanToJson(n->evaluation.plan)},
          {"step_time_s", n->evaluation.step.total.value()},
          {"tokens_per_s_per_gpu", n->evaluation.step.tokens_per_s_per_gpu},
          {"actor_total_bytes", n->evaluation.memory.actor.total().value()}};
}

}  // namespace kp
