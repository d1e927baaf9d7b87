#include "launcher/launch_spec.h"

#include "launcher/native_run.h"

#include <cstdio>
#include <sstream>

#include "common/text.h"
#include "launcher/native_run.h"
#include "launcher/quoting.h"
#include "planner/schedule_model.h"

namespace kp {

namespace {

constexpr int kModalMaxNodes = 32;   // modal.com/docs/guide/multi-node-clusters: "up to 32 nodes and 256 GPUs"
constexpr int kSlurmMaxNodes = 64;
constexpr int kModalGpusPerHost = 8;
constexpr int kVerlCpusPerTask = 64;  // Verl's own Ray-on-Slurm example

bool AllDigits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// Splits "a:b:c" into its fields; every field must be digits.
bool Fields(const std::string& s, std::vector<int>* out) {
  std::stringstream ss(s);
  std::string f;
  while (std::getline(ss, f, ':')) {
    if (!AllDigits(f) || f.size() > 6) return false;
    out->push_back(std::stoi(f));
  }
  return !s.empty() && s.back() != ':';
}

Status CheckPlanFits(const Launch& l) {
  if (l.evaluation.feasible() || l.options.force) return Status::Ok();
  return Status::InvalidArgument(l.options.source + ": the planner marks the plan infeasible (" +
                                 l.evaluation.violations.front() + "); --force launches it anyway");
}

Status CheckEngine(const Launch& l) {
  const LaunchOptions& o = l.options;
  KP_RETURN_IF_ERROR(CheckEngineTarget(o));
  if (o.engine != LaunchEngine::kVerl) return Status::Ok();
  if (l.request.placement == Placement::kSplit)
    return Status::InvalidArgument("--engine: verl runs the colocated hybrid engine, and this plan has "
                                   "--placement split; use --engine native");
  const ScheduleKind s = l.request.schedule;
  if (s != ScheduleKind::k1F1B && s != ScheduleKind::kInterleaved1F1B)
    return Status::InvalidArgument(std::string("--engine: Megatron under verl runs 1f1b and interleaved-1f1b, not the "
                                               "plan's ") + ScheduleName(s) + " schedule; use --engine native");
  if (o.teacher_nodes < 0)
    return Status::InvalidArgument("--teacher-nodes: must be 0 or more, got " + std::to_string(o.teacher_nodes));
  const int replica = l.plan().rollout_tp * l.plan().rollout_dp;
  const int pool = o.teacher_nodes * l.request.gpus_per_node;
  if (replica <= 0 || pool % replica != 0)
    return Status::InvalidArgument("--teacher-nodes: a teacher replica takes rollout tp x dp = " +
                                   std::to_string(replica) + " GPUs, which does not divide the " +
                                   std::to_string(pool) + " GPUs of " + std::to_string(o.teacher_nodes) +
                                   " teacher node(s)");
  return Status::Ok();
}

std::string CountsText(const StageSplit& split) {
  std::string out;
  for (int c : LayerCounts(split)) out += (out.empty() ? "" : ",") + std::to_string(c);
  return out;
}

// The layers per stage the launch's engine builds must be the ones the
// planner sized.
Status CheckSplit(const Launch& l) {
  const PlanEvaluation& e = l.evaluation;
  const std::string plans = "the plan's " + e.layer_split.ToString() + " split (" + CountsText(e.split) + ")";
  if (l.options.engine == LaunchEngine::kVerl) {
    Result<MegatronStageLayers> m = MegatronLayersOfPlan(l.request, e);
    if (m.ok()) return Status::Ok();
    return Status::InvalidArgument("--layer-split: --engine verl cannot run " + plans + ": " +
                                   m.status().message().substr(std::string("--layer-split: ").size()) +
                                   "; plan it with --layer-split megatron or counts Megatron builds");
  }
  // The native runtime builds any split as given (--layer-split).
  return Status::Ok();
}

// The native runtime runs the plan as planned or is not launched.
Status CheckNativeRun(const Launch& l) {
  if (l.options.engine != LaunchEngine::kNative) return Status::Ok();
  PlanRequest r = l.request;
  r.plan = l.plan();
  return CheckNativeExecutes(r);
}

Status CheckSize(const Launch& l) {
  const LaunchOptions& o = l.options;
  if (o.max_nodes < 0) return Status::InvalidArgument("--max-nodes: must be positive, got " + std::to_string(o.max_nodes));
  const int nodes = l.job_nodes();
  if (nodes <= l.max_nodes()) return Status::Ok();
  std::string what = std::to_string(nodes) + " nodes (" + std::to_string(nodes * l.request.gpus_per_node) + " GPUs";
  if (l.teacher_nodes() > 0) what += ", " + std::to_string(l.teacher_nodes()) + " of them for the teacher";
  return Status::InvalidArgument("--max-nodes: the job needs " + what + ") but the " + LaunchTargetName(o.target) +
                                 " target allows " + std::to_string(l.max_nodes()) +
                                 (o.target == LaunchTarget::kLocal ? " (this machine)" : "; raise --max-nodes where the cluster has more"));
}

bool SlurmNameChars(const std::string& s) {
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::string("_.,:@+-").find(c) != std::string::npos;
    if (!ok) return false;
  }
  return true;
}

Status CheckTarget(const Launch& l) {
  const LaunchOptions& o = l.options;
  if (o.wall_time_s <= 0) return Status::InvalidArgument("--time: must be positive");
  if (o.master_port < 1 || o.master_port > 65535)
    return Status::InvalidArgument("--master-port: must be 1..65535, got " + std::to_string(o.master_port));
  if (o.join_timeout_s <= 0)
    return Status::InvalidArgument("--join-timeout: must be positive, got " + std::to_string(o.join_timeout_s));
  if (o.cpus_per_task < 0)
    return Status::InvalidArgument("--cpus-per-task: must be positive, got " + std::to_string(o.cpus_per_task));
  if (o.target == LaunchTarget::kSlurm) {
    if (!SlurmNameChars(o.partition))
      return Status::InvalidArgument("--partition: letters, digits and _.,:@+- only, got \"" + o.partition + "\"");
    if (!SlurmNameChars(o.account))
      return Status::InvalidArgument("--account: letters, digits and _.,:@+- only, got \"" + o.account + "\"");
  }
  if (o.target != LaunchTarget::kModal) return Status::Ok();
  KP_RETURN_IF_ERROR(ModalGpuName(l.request.gpu.name).status());
  if (l.request.gpus_per_node != kModalGpusPerHost)
    return Status::InvalidArgument("--gpus-per-node: Modal clusters take whole 8-GPU hosts, the plan has " +
                                   std::to_string(l.request.gpus_per_node) + " GPUs per node");
  if (o.wall_time_s > kModalMaxTimeoutS)
    return Status::InvalidArgument("--time: Modal functions run at most " + SlurmWallTime(kModalMaxTimeoutS) +
                                   ", got " + SlurmWallTime(o.wall_time_s));
  return Status::Ok();
}

void Flag(std::vector<std::string>& a, const char* name, const std::string& value) {
  a.push_back(name);
  a.push_back(value);
}

void Flag(std::vector<std::string>& a, const char* name, long long value) { Flag(a, name, std::to_string(value)); }

}  // namespace

Status CheckEngineTarget(const LaunchOptions& o) {
  if (o.engine == LaunchEngine::kVerl && o.target == LaunchTarget::kLocal)
    return Status::InvalidArgument("--engine: the local target runs the native runtime only, not verl");
  return Status::Ok();
}

const char* LaunchTargetName(LaunchTarget t) {
  switch (t) {
    case LaunchTarget::kSlurm: return "slurm";
    case LaunchTarget::kModal: return "modal";
    case LaunchTarget::kLocal: return "local";
  }
  return "?";
}

const char* LaunchEngineName(LaunchEngine e) { return e == LaunchEngine::kNative ? "native" : "verl"; }

Result<LaunchTarget> ParseLaunchTarget(const std::string& name) {
  for (LaunchTarget t : {LaunchTarget::kSlurm, LaunchTarget::kModal, LaunchTarget::kLocal})
    if (name == LaunchTargetName(t)) return t;
  return Status::InvalidArgument("--target: must be slurm, modal or local, got \"" + name + "\"");
}

Result<LaunchEngine> ParseLaunchEngine(const std::string& name) {
  if (name == "native") return LaunchEngine::kNative;
  if (name == "verl") return LaunchEngine::kVerl;
  return Status::InvalidArgument("--engine: must be native or verl, got \"" + name + "\"");
}

Result<int> ParseWallTime(const std::string& text) {
  const Status bad = Status::InvalidArgument("--time: use minutes, HH:MM:SS or D-HH[:MM[:SS]] as sbatch does, got \"" +
                                             text + "\"");
  std::string rest = text;
  long long days = -1;
  if (const size_t dash = text.find('-'); dash != std::string::npos) {
    if (!AllDigits(text.substr(0, dash)) || dash > 4) return bad;
    days = std::stoll(text.substr(0, dash));
    rest = text.substr(dash + 1);
  }
  std::vector<int> f;
  if (!Fields(rest, &f) || f.empty() || f.size() > 3) return bad;
  long long s = 0;
  if (days >= 0) {  // D-HH, D-HH:MM, D-HH:MM:SS
    s = days * 86400 + f[0] * 3600LL + (f.size() > 1 ? f[1] * 60LL : 0) + (f.size() > 2 ? f[2] : 0);
  } else if (f.size() == 1) {  // MM
    s = f[0] * 60LL;
  } else if (f.size() == 2) {  // MM:SS
    s = f[0] * 60LL + f[1];
  } else {  // HH:MM:SS
    s = f[0] * 3600LL + f[1] * 60LL + f[2];
  }
  if (s <= 0 || s > 365LL * 86400) return bad;
  return static_cast<int>(s);
}

std::string SlurmWallTime(int seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%d-%02d:%02d:%02d", seconds / 86400, seconds / 3600 % 24, seconds / 60 % 60,
                seconds % 60);
  return buf;
}

int DefaultMaxNodes(LaunchTarget t) {
  switch (t) {
    case LaunchTarget::kSlurm: return kSlurmMaxNodes;
    case LaunchTarget::kModal: return kModalMaxNodes;
    case LaunchTarget::kLocal: return 1;
  }
  return 1;
}

int Launch::teacher_nodes() const { return options.engine == LaunchEngine::kVerl ? options.teacher_nodes : 0; }
int Launch::job_nodes() const { return request.nodes + teacher_nodes(); }
int Launch::max_nodes() const { return options.max_nodes > 0 ? options.max_nodes : DefaultMaxNodes(options.target); }

std::string Launch::model_path() const {
  return options.model_path.empty() ? "/cache/models/" + request.model.name : options.model_path;
}

std::string Launch::teacher_path() const { return options.teacher_path.empty() ? model_path() : options.teacher_path; }

int Launch::cpus_per_task() const {
  if (options.cpus_per_task > 0) return options.cpus_per_task;
  return options.engine == LaunchEngine::kVerl ? kVerlCpusPerTask : 0;
}

Status CheckLaunch(const Launch& l) {
  KP_RETURN_IF_ERROR(CheckPlanFits(l));
  KP_RETURN_IF_ERROR(CheckEngine(l));
  KP_RETURN_IF_ERROR(CheckSplit(l));
  KP_RETURN_IF_ERROR(CheckNativeRun(l));
  KP_RETURN_IF_ERROR(CheckTarget(l));
  return CheckSize(l);
}

Result<MegatronStageLayers> MegatronLayersOfPlan(const PlanRequest& r, const PlanEvaluation& e) {
  // Without a pipeline Megatron builds every layer on the one stage.
  if (e.plan.pp == 1) return MegatronStageLayers{};
  return MegatronStageLayersOf(e.split, e.plan.pp, StagesPerRank(r.schedule, e.plan.vp));
}

Result<std::string> ModalGpuName(const std::string& gpu) {
  // modal.com/docs/guide/gpu: the GPU types a function can request.
  static const std::pair<const char*, const char*> kNames[] = {
      {"a100-80g", "A100-80GB"}, {"h100", "H100"}, {"h200", "H200"}, {"b200", "B200"}};
  for (const auto& [ours, modal] : kNames)
    if (gpu == ours) return std::string(modal);
  return Status::InvalidArgument("--gpu: Modal offers a100-80g, h100, h200 and b200, not \"" + gpu + "\"");
}

std::vector<std::string> NativeRunArgs(const Launch& l, int nproc) {
  const PlanRequest& r = l.request;
  const ParallelPlan& p = l.plan();
  std::vector<std::string> a = {"run"};
  if (nproc > 0) Flag(a, "--nproc", nproc);
  Flag(a, "--model", r.model.name);
  Flag(a, "--mode", r.mode == TrainMode::kLora ? "lora" : "full");
  if (r.mode == TrainMode::kLora) {
    Flag(a, "--lora-rank", r.lora.rank);
    Flag(a, "--lora-alpha", FormatNumber(r.lora.alpha));
  }
  Flag(a, "--prompt-length", r.prompt_length);
  Flag(a, "--response-length", r.response_length);
  Flag(a, "--global-batch", r.global_batch);
  Flag(a, "--micro-batch", r.micro_batch);
  Flag(a, "--rollout-n", r.rollout_n);
  Flag(a, "--schedule", ScheduleName(r.schedule));
  // What the recomputation executes as (CheckLaunch refused the rest).
  const Result<LayerCheckpointing> checkpointing = CheckpointingOf(r);
  if (checkpointing.ok() && checkpointing->enabled) {
    Flag(a, "--recompute", "full");
    if (checkpointing->first_layers > 0) {
      Flag(a, "--recompute-method", "block");
      Flag(a, "--recompute-num-layers", checkpointing->first_layers);
    } else if (checkpointing->group_layers > 1) {
      Flag(a, "--recompute-method", "uniform");
      Flag(a, "--recompute-num-layers", checkpointing->group_layers);
    }
  }
  if (checkpointing.ok()) {
    std::string modules;
    const LayerCheckpointing& c = *checkpointing;
    for (const auto& [on, name] : {std::pair{c.moe, "moe"}, {c.mlp, "mlp"}, {c.shared_experts, "shared_experts"},
                                   {c.layernorm, "layernorm"}, {c.moe_act, "moe_act"}, {c.mla_up_proj, "mla_up_proj"}})
      if (on) modules += (modules.empty() ? "" : ",") + std::string(name);
    if (!modules.empty()) {
      Flag(a, "--recompute", "selective");
      Flag(a, "--recompute-modules", modules);
    }
  }
  Flag(a, "--dtype", "bf16");
  Flag(a, "--state-precision", r.state_precision == StatePrecision::kMixed ? "mixed" : "fp32");
  Flag(a, "--distributed-optimizer", r.distributed_optimizer ? "on" : "off");
  for (const auto& [flag, v] : {std::pair{"--tp", p.tp}, {"--pp", p.pp}, {"--vp", p.vp}, {"--ep", p.ep},
                                {"--etp", p.etp}, {"--cp", p.cp}, {"--dp", p.dp}})
    Flag(a, flag, v);
  if (p.tp > 1) Flag(a, "--sequence-parallel", r.sequence_parallel ? "on" : "off");
  Flag(a, "--layer-split", l.evaluation.layer_split.ToString());
  return a;
}

std::vector<std::vector<std::string>> FlagLines(const std::vector<std::string>& args) {
  std::vector<std::vector<std::string>> lines;
  for (size_t i = 0; i < args.size(); ++i) {
    const bool takes_value = args[i].rfind("--", 0) == 0 && i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0;
    lines.push_back(takes_value ? std::vector<std::string>{args[i], args[i + 1]} : std::vector<std::string>{args[i]});
    if (takes_value) ++i;
  }
  return lines;
}

std::vector<std::pair<std::string, std::string>> NcclDefaults() {
  return {{"CUDA_DEVICE_MAX_CONNECTIONS", "1"},
          {"NCCL_DEBUG", "WARN"},
          {"NCCL_IB_DISABLE", "0"},
          {"NCCL_SOCKET_IFNAME", "^lo,docker0"},
          {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}};
}

std::string LayoutLine(const ParallelPlan& p) {
  std::ostringstream o;
  o << "tp " << p.tp << " pp " << p.pp << " vp " << p.vp << " ep " << p.ep << " etp " << p.etp << " cp " << p.cp
    << " dp " << p.dp << ", rollout tp " << p.rollout_tp << " ep " << p.rollout_ep << " dp " << p.rollout_dp;
  return o.str();
}

std::vector<std::string> DescribeLaunch(const Launch& l) {
  const PlanRequest& r = l.request;
  std::vector<std::string> lines;
  lines.push_back("Plan: " + r.model.name + " on " + std::to_string(r.nodes) + " x " + std::to_string(r.gpus_per_node) +
                  " " + r.gpu.name + " (" + std::to_string(r.world()) + " GPUs), " +
                  (r.mode == TrainMode::kLora ? "LoRA rank " + std::to_string(r.lora.rank) : std::string("full fine-tuning")) +
                  ", schedule " + ScheduleName(r.schedule) + ", recompute " + RecomputeLabel(r) + ".");
  lines.push_back("Layout: " + LayoutLine(l.plan()) + ".");
  lines.push_back("Stage split: " + l.evaluation.layer_split.ToString() + ", " + l.evaluation.split.ToString() + ".");
  if (l.teacher_nodes() > 0)
    lines.push_back("Self-teacher: " + std::to_string(l.teacher_nodes()) + " more node(s) for Verl's distillation pool.");
  lines.push_back(l.evaluation.feasible()
                      ? std::string("Verdict: every role fits on every rank.")
                      : "Verdict: the planner marks this plan infeasible (" + l.evaluation.violations.front() +
                            "); launched with --force.");
  // Comment lines of a script: a control byte in a name (a line break
  // ends the comment and starts a command) is shown escaped, never written.
  for (std::string& line : lines) line = EscapeControl(line);
  return lines;
}

}  // namespace kp
