#include "launcher/slurm_script.h"

#include <sstream>

#include "ingest/metrics_file.h"
#include "launcher/quoting.h"

namespace kp {

namespace {

void Header(const Launch& l, std::ostream& s) {
  const LaunchOptions& o = l.options;
  const bool verl = o.engine == LaunchEngine::kVerl;
  s << "#!/bin/bash\n"
    << "# kimi-plan launch: " << o.label << " on Slurm, engine " << LaunchEngineName(o.engine) << ".\n";
  for (const std::string& line : DescribeLaunch(l)) s << "# " << line << "\n";
  s << "# Start: sbatch " << kSlurmScriptName << " [extra arguments for " << (verl ? "Verl's trainer" : "`kimi-plan run`") << "]\n"
    << "#SBATCH --job-name=kimi-plan-" << o.label << "\n"
    << "#SBATCH --nodes=" << l.job_nodes() << "\n"
    // Native: one task per GPU, each a rank. Verl: one Ray node per host.
    << "#SBATCH --ntasks-per-node=" << (verl ? 1 : l.request.gpus_per_node) << "\n"
    << "#SBATCH --gpus-per-node=" << l.request.gpus_per_node << "\n"
    << "#SBATCH --time=" << SlurmWallTime(o.wall_time_s) << "\n"
    << "#SBATCH --exclusive\n";
  if (!o.partition.empty()) s << "#SBATCH --partition=" << o.partition << "\n";
  if (!o.account.empty()) s << "#SBATCH --account=" << o.account << "\n";
  if (l.cpus_per_task() > 0) s << "#SBATCH --cpus-per-task=" << l.cpus_per_task() << "\n";
  s << "set -euo pipefail\n\n";
}

void Environment(const Launch& l, std::ostream& s) {
  s << "# The allocation's first node hosts the rendezvous (the c10d store, the Ray head).\n"
    << "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1)\n"
    << "export MASTER_ADDR\n"
    << "export MASTER_PORT=${MASTER_PORT:-" << l.options.master_port << "}\n\n"
    << "# Seed 001's NCCL defaults (docs/launcher.md); a value exported before sbatch wins.\n";
  for (const auto& [name, value] : NcclDefaults())
    s << "export " << name << "=${" << name << ":-" << ShellQuote(value) << "}\n";
  s << "\n";
}

void Array(std::ostream& s, const char* name, const std::vector<std::string>& words) {
  s << name << "=(\n";
  for (const std::string& w : words) s << "  " << ShellQuote(w) << "\n";
  s << ")\n";
}

void NativeBody(const Launch& l, std::ostream& s) {
  s << "KIMI_PLAN=${KIMI_PLAN:-" << ShellQuote(l.options.kimi_plan) << "}\n"
    << "RUN_ARGS=(\n";
  for (const std::vector<std::string>& line : FlagLines(NativeRunArgs(l, 0))) {
    s << " ";
    for (const std::string& w : line) s << " " << ShellQuote(w);
    s << "\n";
  }
  s << ")\n";
  s << "\necho \"kimi-plan: $SLURM_NTASKS ranks on $SLURM_JOB_NUM_NODES nodes, rendezvous $MASTER_ADDR:$MASTER_PORT\"\n"
    << "# One task per GPU. Each task turns Slurm's ids into the torchrun-style\n"
    << "# environment and becomes that rank; one rank failing ends the others.\n"
    << "# Its CPU threads are its --cpus-per-task (1 unless set), so that the\n"
    << "# ranks' OpenMP teams do not spin against each other.\n"
    << "srun --kill-on-bad-exit=1 --nodes=" << l.request.nodes << " --ntasks-per-node=" << l.request.gpus_per_node
    << " \\\n"
    << "  bash -c 'export RANK=\"$SLURM_PROCID\" WORLD_SIZE=\"$SLURM_NTASKS\" LOCAL_RANK=\"$SLURM_LOCALID\" "
       "LOCAL_WORLD_SIZE=\"$SLURM_NTASKS_PER_NODE\" "
       "OMP_NUM_THREADS=\"${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}\"; exec \"$@\"' \\\n"
    << "  kimi-plan-rank \"$KIMI_PLAN\" \"${RUN_ARGS[@]}\" \"$@\"\n";
}

// Polls the node count rather than sleeping a fixed time: a node that is
// slow to join delays the trainer, one that never joins fails the job.
const char* kRayWait = R"(ray_alive_nodes() {  # how many Ray nodes are alive; 0 while the head is not up
  python3 - <<'PY' 2>/dev/null | tail -n1 || echo 0
import os, ray
ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR", log_to_driver=False)
print(sum(1 for n in ray.nodes() if n["Alive"]))
PY
}

wait_for_ray_nodes() {  # wait_for_ray_nodes COUNT: until COUNT nodes are alive, at most JOIN_TIMEOUT_S
  local want=$1 have=0 deadline=$((SECONDS + JOIN_TIMEOUT_S))
  while :; do
    have=$(ray_alive_nodes)
    if [ "${have:-0}" -ge "$want" ]; then
      echo "kimi-plan: $have of $want Ray nodes alive"
      return 0
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "kimi-plan: only ${have:-0} of $want Ray nodes joined within $JOIN_TIMEOUT_S s" >&2
      return 1
    fi
    sleep 5
  done
}
)";

// Where Verl's file logger writes (one JSON line a step) and the job file
// beside it, which names the plan and, once the trainer returns, its exit
// code: what `kimi-plan ingest` reads back.
void MetricsFiles(const Launch& l, std::ostream& s) {
  const std::string& dir = l.options.job_dir;
  const bool absolute = !dir.empty() && dir.front() == '/';
  s << "\n# Verl's file logger and the job file `kimi-plan ingest` reads (docs/launcher.md).\n"
    << "KIMI_PLAN_JOB_DIR=${KIMI_PLAN_JOB_DIR:-" << (absolute ? "" : "\"$SLURM_SUBMIT_DIR\"/") << ShellQuote(dir) << "}\n"
    << "export VERL_FILE_LOGGER_PATH=${VERL_FILE_LOGGER_PATH:-\"$KIMI_PLAN_JOB_DIR/" << kVerlMetricsFileName << "\"}\n"
    << "KIMI_PLAN_JOB_FILE=\"$(dirname \"$VERL_FILE_LOGGER_PATH\")/" << kJobFileName << "\"\n"
    << "KIMI_PLAN_JOB=" << ShellQuote(JobFileJson(l.options.plan_id, l.options.label, "verl")) << "\n"
    << "mkdir -p \"$(dirname \"$VERL_FILE_LOGGER_PATH\")\"\n"
    << "printf '%s\\n' \"$KIMI_PLAN_JOB\" > \"$KIMI_PLAN_JOB_FILE\"\n\n";
}

Status VerlBody(const Launch& l, const VerlKeys& keys, std::ostream& s) {
  KP_ASSIGN_OR_RETURN(std::vector<VerlOverride> overrides, VerlOverrides(l, keys));
  std::vector<std::string> args;
  for (const VerlOverride& v : overrides) args.push_back(v.Text());
  s << "python3 -c 'import ray, verl' || {\n"
    << "  echo \"kimi-plan: python3 cannot import ray and verl; activate Verl's environment before sbatch\" >&2\n"
    << "  exit 1\n}\n\n"
    << "mapfile -t NODES < <(scontrol show hostnames \"$SLURM_JOB_NODELIST\")\n"
    << "# Ray wants an address, not a host name: the head's first IP.\n"
    << "HEAD_IP=$(srun --overlap --nodes=1 --ntasks=1 -w \"$MASTER_ADDR\" hostname --ip-address | awk '{print $1}')\n"
    << "RAY_PORT=${RAY_PORT:-" << l.options.ray_port << "}\n"
    << "export RAY_ADDRESS=\"$HEAD_IP:$RAY_PORT\"\n"
    << "JOIN_TIMEOUT_S=" << l.options.join_timeout_s << "\n"
    << "RAY_NODE_ARGS=(--num-gpus=" << l.request.gpus_per_node
    << " --num-cpus=\"$SLURM_CPUS_PER_TASK\" --disable-usage-stats --block)\n\n"
    << kRayWait << "\n"
    << "srun --overlap --nodes=1 --ntasks=1 -w \"$MASTER_ADDR\" \\\n"
    << "  ray start --head --node-ip-address=\"$HEAD_IP\" --port=\"$RAY_PORT\" \"${RAY_NODE_ARGS[@]}\" &\n"
    << "wait_for_ray_nodes 1\n"
    << "for node in \"${NODES[@]:1}\"; do\n"
    << "  srun --overlap --nodes=1 --ntasks=1 -w \"$node\" ray start --address=\"$RAY_ADDRESS\" \"${RAY_NODE_ARGS[@]}\" &\n"
    << "done\n"
    << "wait_for_ray_nodes " << l.job_nodes() << "\n\n";
  Array(s, "VERL_ARGS", args);
  MetricsFiles(l, s);
  // set -e would end the script with the trainer, before the job file
  // could say how it ended.
  s << "rc=0\n"
    << "python3 -m " << kVerlTrainerModule << " \"${VERL_ARGS[@]}\" \"$@\" || rc=$?\n"
    << "# The trainer returned: the job file says how, for `kimi-plan ingest` (and its --follow).\n"
    << "printf '%s\\n' \"${KIMI_PLAN_JOB/\\\"exit_code\\\":null/\\\"exit_code\\\":$rc}\" > \"$KIMI_PLAN_JOB_FILE.tmp\" && "
       "mv \"$KIMI_PLAN_JOB_FILE.tmp\" \"$KIMI_PLAN_JOB_FILE\"\n"
    << "exit $rc\n";
  return Status::Ok();
}

}  // namespace

Result<std::string> SlurmScript(const Launch& l, const VerlKeys& keys) {
  std::ostringstream s;
  Header(l, s);
  Environment(l, s);
  if (l.options.engine == LaunchEngine::kNative) NativeBody(l, s);
  else KP_RETURN_IF_ERROR(VerlBody(l, keys, s));
  return s.str();
}

}  // namespace kp
