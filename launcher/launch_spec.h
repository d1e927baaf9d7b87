// What `kimi-plan launch` launches: an evaluated plan, the target that runs
// it (Slurm, Modal, this machine), the engine (the native runtime or Verl)
// and the target's knobs; the checks a launch must pass; and what every
// target shares: the native runtime's command line and the NCCL defaults.
// docs/launcher.md describes the generated files and the contracts.
//
// Everything here is a pure function of its arguments.
#ifndef KIMI_PLAN_LAUNCHER_LAUNCH_SPEC_H_
#define KIMI_PLAN_LAUNCHER_LAUNCH_SPEC_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "planner/planner.h"

namespace kp {

enum class LaunchTarget { kSlurm, kModal, kLocal };
enum class LaunchEngine { kNative, kVerl };

const char* LaunchTargetName(LaunchTarget t);
const char* LaunchEngineName(LaunchEngine e);
/// "slurm", "modal" or "local"; InvalidArgument naming --target otherwise.
Result<LaunchTarget> ParseLaunchTarget(const std::string& name);
/// "native" or "verl"; InvalidArgument naming --engine otherwise.
Result<LaunchEngine> ParseLaunchEngine(const std::string& name);

/// Seconds from a wall time as Slurm's --time spells it: "MM", "HH:MM:SS",
/// "D-HH", "D-HH:MM" or "D-HH:MM:SS". InvalidArgument naming --time.
Result<int> ParseWallTime(const std::string& text);
/// "D-HH:MM:SS" for sbatch.
std::string SlurmWallTime(int seconds);

/// The most nodes a target takes unless --max-nodes says otherwise: Modal's
/// documented cluster limit (32 nodes), a generous Slurm partition (64), and
/// one node for this machine.
int DefaultMaxNodes(LaunchTarget t);
/// Modal's longest function timeout, 24 h.
inline constexpr int kModalMaxTimeoutS = 24 * 3600;

struct LaunchOptions {
  LaunchTarget target = LaunchTarget::kSlurm;
  LaunchEngine engine = LaunchEngine::kNative;
  /// Names the job, its Modal app and its directory: the preset, the plan
  /// id, or "custom". Letters, digits, '-', '_' and '.' only.
  std::string label = "custom";
  /// How the user named the plan, for messages: "--preset h200-full", "--plan 3".
  std::string source = "the plan";
  bool force = false;            ///< launch a plan the planner marks infeasible
  int max_nodes = 0;             ///< 0: DefaultMaxNodes(target)
  int wall_time_s = 24 * 3600;
  std::string partition;         ///< Slurm; empty: the cluster's default
  std::string account;           ///< Slurm; empty: the user's default
  int cpus_per_task = 0;         ///< Slurm; 0: 64 for Verl's one task per node, unset for native ranks
  int master_port = 29500;       ///< the native runtime's c10d TCPStore
  int ray_port = 6379;           ///< Verl: the Ray head's port
  int join_timeout_s = 600;      ///< how long Ray waits for every node to join
  /// Verl: nodes of the self-teacher's inference pool, added to the plan's;
  /// 0 turns on-policy distillation off.
  int teacher_nodes = 1;
  std::string model_path;        ///< Verl: the student; empty: /cache/models/<model>
  std::string teacher_path;      ///< Verl: empty: the student (self-distillation)
  std::string train_files = "/cache/data/train.parquet";
  std::string val_files = "/cache/data/test.parquet";
  std::string image;             ///< Modal; empty: the engine's default image
  std::string kimi_plan = "kimi-plan";  ///< the native runtime's executable where ranks run
  /// The recorded plan launched (`--plan ID`), which the job writes into its
  /// job file for `kimi-plan ingest`; 0 for a preset.
  std::int64_t plan_id = 0;
  /// The job's output folder as `launch` wrote it (--out): Slurm's Verl job
  /// writes its metrics and job file there, relative to the directory sbatch
  /// was run from when not absolute.
  std::string job_dir = "launch/custom";
};

/// One launch: the plan as the planner evaluated it, and how to run it.
struct Launch {
  PlanRequest request;
  PlanEvaluation evaluation;
  LaunchOptions options;

  const ParallelPlan& plan() const { return evaluation.plan; }
  /// Nodes of the teacher pool: options.teacher_nodes with Verl, else 0.
  int teacher_nodes() const;
  /// Nodes the job asks the target for: the plan's plus the teacher's.
  int job_nodes() const;
  int max_nodes() const;
  /// Slurm CPUs per task; 0 leaves it to the cluster.
  int cpus_per_task() const;
  std::string model_path() const;
  std::string teacher_path() const;
};

/// The engine against the target, before any plan is evaluated (the
/// engine's default split may not fit the plan): Verl does not run on the
/// local target. InvalidArgument naming --engine.
Status CheckEngineTarget(const LaunchOptions& o);

/// Every check a launch must pass before anything is written: a feasible
/// plan (unless force), a job no larger than max_nodes, what the target
/// and the engine support, and a stage split the engine builds exactly
/// (Verl: one Megatron can express; native: the even split, as `kimi-plan
/// run` takes no split). InvalidArgument naming the flag.
Status CheckLaunch(const Launch& l);

/// The Megatron-LM fields under which Verl's Megatron engine builds exactly
/// the plan's stage split (virtual stage j of rank r is stage j * pp + r):
/// none for Megatron's default split or a plan without a pipeline, else
/// num_layers_in_first/last_pipeline_stage. InvalidArgument naming
/// --layer-split when Megatron cannot build the split.
Result<MegatronStageLayers> MegatronLayersOfPlan(const PlanRequest& r, const PlanEvaluation& e);

/// Modal's name for the plan's GPU ("H200"), or InvalidArgument naming --gpu.
Result<std::string> ModalGpuName(const std::string& gpu);

/// The arguments after the executable that start the native runtime with
/// the plan: `run` and the plan-request flags of `kimi-plan plan` (model,
/// GPU, cluster, workload, layout, schedule). With `nproc` > 0 it starts
/// that many local ranks itself (--nproc); otherwise each process is one
/// rank told by the torchrun-style environment.
std::vector<std::string> NativeRunArgs(const Launch& l, int nproc);

/// Seed 001's NCCL defaults, in the order the job files export them.
std::vector<std::pair<std::string, std::string>> NcclDefaults();

/// The job files' names under the output directory.
inline constexpr const char* kSlurmScriptName = "kimi-plan.sbatch";
inline constexpr const char* kModalAppName = "kimi_plan_modal.py";

/// Pairs each flag of `args` with its value ("--tp", "8" -> "--tp 8") for
/// display, one entry per line of a generated file.
std::vector<std::vector<std::string>> FlagLines(const std::vector<std::string>& args);

/// Lines describing the launch for the job file's header: the plan, the
/// layout, the teacher pool and the planner's verdict; control bytes shown
/// escaped, so each is one line of a comment whatever a name holds.
std::vector<std::string> DescribeLaunch(const Launch& l);

/// A one-line summary of the layout: "tp 8 pp 2 vp 1 ep 8 etp 1 cp 1 dp 8, rollout tp 8 ep 8 dp 1".
std::string LayoutLine(const ParallelPlan& p);

}  // namespace kp

#endif  // KIMI_PLAN_LAUNCHER_LAUNCH_SPEC_H_
