#include "planner/constraints.h"

#include "common/limits.h"
#include "planner/schedule_model.h"
#include "specs/stage_split.h"

namespace kp {

namespace {

std::string S(long long v) { return std::to_string(v); }

// Empty when some rule of the request's --layer-split splits the plan's
// stages; else the first rule's reason.
std::string SplitViolation(const PlanRequest& r, const ParallelPlan& p) {
  std::string first;
  const int spr = StagesPerRank(r.schedule, p.vp);
  for (const LayerSplit& rule : SplitCandidates(r.layer_split, r.model.layers, r.model.mtp_layers, p.pp, spr)) {
    Result<StageSplit> split = SplitLayers(rule, r.model.layers, p.pp, spr, r.model.mtp_layers);
    if (split.ok()) return "";
    if (first.empty()) first = split.status().message();
  }
  return first;
}

}  // namespace

Status ValidateRequest(const PlanRequest& r) {
  // A request also comes back from the store (RequestFromJson), not only
  // from flags that checked their own ranges: the cluster's size first, in
  // 64 bits, so that nothing below multiplies a wrapped count.
  if (r.nodes > 0 && r.gpus_per_node > 0 && r.world() > limits::kMaxClusterGpus)
    return Status::InvalidArgument("--nodes: " + S(r.nodes) + " nodes x " + S(r.gpus_per_node) + " GPUs = " +
                                   S(r.world()) + " GPUs; the largest cluster is " + S(limits::kMaxClusterGpus));
  const std::pair<const char*, long long> positive[] = {
      {"--nodes", r.nodes}, {"--gpus-per-node", r.gpus_per_node}, {"--prompt-length", r.prompt_length},
      {"--global-batch", r.global_batch},
      {"--micro-batch", r.micro_batch}, {"--rollout-n", r.rollout_n}, {"--top", r.top}};
  for (const auto& [flag, v] : positive)
    if (v <= 0) return Status::InvalidArgument(std::string(flag) + ": must be a positive integer, got " + S(v));
  if (r.sequences() > limits::kMaxBatch)
    return Status::InvalidArgument("--global-batch: global batch x rollout n = " + S(r.sequences()) +
                                   " sequences per step; at most " + S(limits::kMaxBatch));
  if (r.recompute_layers <= 0)
    return Status::InvalidArgument("--recompute-num-layers: must be a positive integer, got " + S(r.recompute_layers));
  if (r.recompute != Recompute::kFull && r.recompute_method != RecomputeMethod::kUniform)
    return Status::InvalidArgument(std::string("--recompute-method: applies to --recompute full only, got --recompute ") +
                                   RecomputeName(r.recompute));
  if (r.recompute != Recompute::kFull && r.recompute_layers != 1)
    return Status::InvalidArgument(std::string("--recompute-num-layers: applies to --recompute full only, got --recompute ") +
                                   RecomputeName(r.recompute));
  if (r.response_length < 0)
    return Status::InvalidArgument("--response-length: must be >= 0, got " + S(r.response_length));
  if (r.mode == TrainMode::kLora) {
    if (r.lora.rank <= 0) return Status::InvalidArgument("--lora-rank: must be a positive integer, got " + S(r.lora.rank));
    if (r.lora.alpha <= 0) return Status::InvalidArgument("--lora-alpha: must be > 0");
  }
  if (r.activation_profile && r.activation_profile->layers.size() != static_cast<size_t>(r.model.layers))
    return Status::InvalidArgument("--activation-profile: measured " + S(r.activation_profile->layers.size()) +
                                   " layers of " + r.activation_profile->model + ", the model has " +
                                   S(r.model.layers) + " (profile the same model: kimi-plan profile)");
  if (r.activation_profile && r.activation_profile->seq_len != r.seq_length())
    return Status::InvalidArgument("--activation-profile: measured on " + S(r.activation_profile->seq_len) +
                                   "-token sequences, the plan's are " + S(r.seq_length()) +
                                   " (profile at the plan's --seq-len)");
  if (r.activation_profile && (r.activation_profile->lora_rank > 0) != (r.mode == TrainMode::kLora))
    return Status::InvalidArgument(
        r.activation_profile->lora_rank > 0
            ? "--activation-profile: measured with LoRA adapters of rank " + S(r.activation_profile->lora_rank) +
                  ", the plan trains the full weights (profile without --lora-rank)"
            : std::string("--activation-profile: measured training the full weights, the plan trains LoRA adapters "
                          "(profile with --lora-rank)"));
  if (!(r.gpu_memory_utilization > 0 && r.gpu_memory_utilization < 1))
    return Status::InvalidArgument("--gpu-memory-utilization: must be in (0, 1)");
  if (r.placement == Placement::kSplit && (r.rollout_gpus <= 0 || r.rollout_gpus >= r.world()))
    return Status::InvalidArgument("--rollout-gpus: with --placement split it must be between 1 and " +
                                   S(r.world() - 1) + " (the cluster has " + S(r.world()) + " GPUs)");
  const EfficiencyModel& e = r.efficiency;
  if (!(e.matmul > 0 && e.matmul <= 1)) return Status::InvalidArgument("--matmul-efficiency: must be in (0, 1]");
  if (!(e.comm > 0 && e.comm <= 1)) return Status::InvalidArgument("--comm-efficiency: must be in (0, 1]");
  if (!(e.dp_overlap >= 0 && e.dp_overlap <= 1)) return Status::InvalidArgument("--dp-overlap: must be in [0, 1]");
  if (!(e.moe_imbalance >= 1)) return Status::InvalidArgument("--moe-imbalance: must be >= 1");
  return r.model.Validate();
}

std::string WithValueSource(const PlanRequest& r, const std::string& message) {
  const std::size_t colon = message.find(':');
  if (message.rfind("--", 0) != 0 || colon == std::string::npos) return message;
  const auto source = r.value_sources.find(message.substr(0, colon));
  return source == r.value_sources.end() ? message : source->second + message.substr(colon);
}

namespace {

// Megatron-core's conditions for overlap_moe_expert_parallel_comm
// (TransformerConfig.__post_init__): expert parallelism, a pipeline of one
// rank or an interleaved one, no full recomputation and no "moe" module
// recomputed, at most one MTP layer.
std::string OverlapViolation(const PlanRequest& r, const ParallelPlan& p) {
  if (!r.recipe.a2a_overlap) return "";
  const std::string why = "--a2a-overlap: Megatron overlaps the expert exchange only ";
  if (p.ep < 2) return why + "with expert parallelism (ep > 1), and ep is " + S(p.ep);
  if (p.pp > 1 && r.schedule != ScheduleKind::kInterleaved1F1B)
    return why + "with pp 1 or an interleaved pipeline (vp > 1); the plan has pp " + S(p.pp) + " under " +
           ScheduleName(r.schedule);
  if (r.recompute == Recompute::kFull) return why + "without full recomputation";
  if (r.recompute == Recompute::kSelective && r.recipe.recomputes(RecomputeModule::kMoe))
    return why + "without the moe module recomputed";
  if (r.model.mtp_layers > 1) return why + "with at most one MTP layer, and the model has " + S(r.model.mtp_layers);
  return "";
}

}  // namespace

std::vector<std::string> CheckPlan(const PlanRequest& r, const ParallelPlan& p) {
  std::vector<std::string> v;
  const ModelSpec& m = r.model;
  const std::pair<const char*, int> sizes[] = {{"--tp", p.tp}, {"--pp", p.pp}, {"--vp", p.vp}, {"--ep", p.ep},
                                               {"--etp", p.etp}, {"--cp", p.cp}, {"--dp", p.dp},
                                               {"--rollout-tp", p.rollout_tp}, {"--rollout-ep", p.rollout_ep},
                                               {"--rollout-dp", p.rollout_dp}};
  for (const auto& [flag, x] : sizes)
    if (x <= 0) v.push_back(std::string(flag) + ": must be a positive integer, got " + S(x));
  if (!v.empty()) return v;
  if (double(p.tp) * p.pp * p.cp * p.dp > double(limits::kMaxClusterGpus) ||
      double(p.ep) * p.etp > double(limits::kMaxClusterGpus) ||
      double(p.rollout_tp) * p.rollout_dp > double(limits::kMaxClusterGpus)) {
    v.push_back("--dp: the layout has more GPUs than the largest cluster (" + S(limits::kMaxClusterGpus) + ")");
    return v;
  }

  const long long gpus = r.actor_gpus();
  if (p.world() != gpus)
    v.push_back("--dp: tp x pp x cp x dp = " + S(p.tp) + " x " + S(p.pp) + " x " + S(p.cp) + " x " + S(p.dp) +
                " = " + S(p.world()) + ", but the actor has " + S(gpus) + " GPUs");
  if (m.heads % p.tp != 0) v.push_back("--tp: " + S(p.tp) + " does not divide the " + S(m.heads) + " attention heads");
  if (m.count(AttentionKind::kMha) > 0 && m.kv_heads % p.tp != 0 && p.tp % m.kv_heads != 0)
    v.push_back("--tp: " + S(p.tp) + " and the " + S(m.kv_heads) + " kv heads must divide one another");
  if (p.tp > r.gpus_per_node)
    v.push_back("--tp: " + S(p.tp) + " spans nodes of " + S(r.gpus_per_node) + " GPUs; keep TP inside the NVLink domain");
  if (!m.is_moe() && (p.ep > 1 || p.etp > 1)) v.push_back("--ep: the model is dense; ep and etp must be 1");
  if (m.is_moe()) {
    if (m.moe.num_experts % p.ep != 0)
      v.push_back("--ep: " + S(p.ep) + " does not divide the " + S(m.moe.num_experts) + " experts");
    if ((1LL * p.tp * p.dp * p.cp) % (1LL * p.ep * p.etp) != 0)
      v.push_back("--ep: ep x etp = " + S(1LL * p.ep * p.etp) + " must divide tp x dp x cp = " + S(1LL * p.tp * p.dp * p.cp) +
                  " (Megatron's expert-parallel folding)");
    if (m.moe.expert_ffn % p.etp != 0)
      v.push_back("--etp: " + S(p.etp) + " does not divide the expert FFN width " + S(m.moe.expert_ffn));
  }
  if (const std::string bad = OverlapViolation(r, p); !bad.empty()) v.push_back(bad);
  if (p.vp > 1 && !ScheduleTakesVp(r.schedule))
    v.push_back(std::string("--vp: ") + ScheduleName(r.schedule) + " has one stage per rank" +
                (ScheduleIsVShaped(r.schedule) ? " pair (always 2); leave --vp at 1" : "; use interleaved-1f1b for vp > 1"));
  if (ScheduleIsVShaped(r.schedule) && p.pp < 2)
    v.push_back(std::string("--pp: ") + ScheduleName(r.schedule) + " needs at least 2 ranks");
  if (const std::string bad = SplitViolation(r, p); !bad.empty()) v.push_back(bad);
  if (r.seq_length() % (2 * p.cp) != 0 && p.cp > 1)
    v.push_back("--cp: " + S(p.cp) + " must split the " + S(r.seq_length()) +
                "-token sequence into 2 x cp equal chunks (load-balanced context parallelism)");
  if (p.dp > 0 && r.sequences() % (static_cast<long long>(p.dp) * r.micro_batch) != 0)
    v.push_back("--global-batch: " + S(r.sequences()) + " sequences (global batch x rollout n) do not divide into dp x micro-batch = " +
                S(static_cast<long long>(p.dp) * r.micro_batch));
  else if (p.dp > 0) {
    const long long m_count = r.sequences() / (static_cast<long long>(p.dp) * r.micro_batch);
    if (r.schedule == ScheduleKind::kInterleaved1F1B && p.vp > 1 && m_count % p.pp != 0)
      v.push_back("--global-batch: interleaved-1f1b needs the " + S(m_count) +
                  " micro-batches per DP rank to be a multiple of pp = " + S(p.pp));
    if (ScheduleIsVShaped(r.schedule) && m_count < 2 * p.pp)
      v.push_back("--global-batch: " + std::string(ScheduleName(r.schedule)) + " needs at least 2 x pp = " +
                  S(2LL * p.pp) + " micro-batches per DP rank, got " + S(m_count));
  }
  // The rollout engine.
  if (m.heads % p.rollout_tp != 0)
    v.push_back("--rollout-tp: " + S(p.rollout_tp) + " does not divide the " + S(m.heads) + " attention heads");
  if (m.is_moe() && p.rollout_ep > 1 && p.rollout_ep != p.rollout_tp * p.rollout_dp)
    v.push_back("--rollout-ep: with expert parallelism on, rollout ep must equal rollout tp x rollout dp = " +
                S(1LL * p.rollout_tp * p.rollout_dp) + " (Verl/vLLM), got " + S(p.rollout_ep));
  if (m.is_moe() && m.moe.num_experts % p.rollout_ep != 0)
    v.push_back("--rollout-ep: " + S(p.rollout_ep) + " does not divide the " + S(m.moe.num_experts) + " experts");
  if (!m.is_moe() && p.rollout_ep > 1) v.push_back("--rollout-ep: the model is dense; rollout ep must be 1");
  if (r.rollout_pool_gpus() % p.rollout_gpus_per_engine() != 0)
    v.push_back("--rollout-tp: engines of rollout tp x dp = " + S(p.rollout_gpus_per_engine()) +
                " GPUs do not tile the " + S(r.rollout_pool_gpus()) + " rollout GPUs");
  return v;
}

}  // namespace kp
