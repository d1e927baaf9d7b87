// `kimi-plan launch`: turns a recorded or described plan into a Slurm or
// Modal job and starts it on request, or runs it on this machine. Every
// check runs before the first file is written.

#include "cli/commands.h"
#include "cli/output_paths.h"
#include "cli/options.h"
#include "cli/simulate_commands.h"
#include "common/limits.h"
#include "common/process_launcher.h"
#include "launcher/launcher.h"

namespace kp {

namespace {

using nlohmann::json;

po::options_description LaunchOptionsDesc() {
  po::options_description desc(
      "kimi-plan launch --target slurm|modal|local (--plan ID | --preset NAME | plan options) [options]\n\n"
      "Writes the job that runs a plan: an sbatch script (slurm) or a Modal app (modal), under --out, and\n"
      "prints the command that starts it (--submit runs it). The local target runs the native runtime\n"
      "here at once. A plan the planner marks infeasible is refused unless --force. docs/launcher.md\n"
      "describes the files. Options");
  desc.add_options()("help,h", "this text")
      ("target", po::value<std::string>(), "slurm | modal | local")
      ("engine", po::value<std::string>()->default_value("native"), "native (kimi-plan run) | verl")
      ("out", po::value<std::string>(), "directory for the job file (default launch/<preset or plan id>)")
      ("submit", "start the job: sbatch FILE or modal run --detach FILE")
      ("force", "launch even if the planner marks the plan infeasible")
      ("max-nodes", IntFlag(1, limits::kMaxNodes), "refuse a job larger than this (default: slurm 64, modal 32, local 1)")
      ("time", po::value<std::string>()->default_value("24:00:00"), "wall time, as sbatch --time spells it")
      ("partition", po::value<std::string>(), "slurm partition")
      ("account", po::value<std::string>(), "slurm account")
      ("cpus-per-task", IntFlag(1, 65536), "slurm CPUs per task (default: 64 with verl, unset with native)")
      ("master-port", IntFlag(1, 65535)->default_value(29500), "native: the rendezvous port on the first node")
      ("join-timeout", IntFlag(1, 7 * 24 * 3600)->default_value(600), "verl: seconds to wait for every Ray node to join")
      ("teacher-nodes", IntFlag(0, limits::kMaxNodes)->default_value(1), "verl: nodes of the self-teacher pool (0: no distillation)")
      ("model-path", po::value<std::string>(), "verl: the model to train (default /cache/models/<model>)")
      ("teacher-path", po::value<std::string>(), "verl: the teacher (default: the model itself)")
      ("train-files", po::value<std::string>()->default_value("/cache/data/train.parquet"), "verl: training data")
      ("val-files", po::value<std::string>()->default_value("/cache/data/test.parquet"), "verl: validation data")
      ("image", po::value<std::string>(), "modal: the container image (default: the engine's)")
      ("kimi-plan", po::value<std::string>()->default_value("kimi-plan"), "native: the executable on the nodes");
  AddPlanSourceOptions(desc);
  AddOutputOptions(desc);
  return desc;
}

template <typename T>
void Set(const po::variables_map& vm, const char* k, T* v) {
  if (vm.count(k)) *v = vm[k].as<T>();
}

// Where the plan comes from, for the job's name and for messages.
void NamePlan(const po::variables_map& vm, LaunchOptions& o) {
  if (vm.count("plan")) {
    const std::string id = std::to_string(vm["plan"].as<std::int64_t>());
    o.label = id;
    o.source = "--plan " + id;
  } else if (vm.count("preset")) {
    o.label = vm["preset"].as<std::string>();
    o.source = "--preset " + o.label;
  } else {
    o.label = "custom";
    o.source = "the plan";
  }
  o.label = JobLabel(o.label);
}

Result<LaunchOptions> OptionsFromFlags(const po::variables_map& vm) {
  LaunchOptions o;
  if (!vm.count("target")) return Status::InvalidArgument("--target: required: slurm, modal or local");
  KP_ASSIGN_OR_RETURN(o.target, ParseLaunchTarget(vm["target"].as<std::string>()));
  KP_ASSIGN_OR_RETURN(o.engine, ParseLaunchEngine(vm["engine"].as<std::string>()));
  KP_ASSIGN_OR_RETURN(o.wall_time_s, ParseWallTime(vm["time"].as<std::string>()));
  NamePlan(vm, o);
  o.force = vm.count("force") > 0;
  Set(vm, "max-nodes", &o.max_nodes);
  if (vm.count("max-nodes") && o.max_nodes <= 0)
    return Status::InvalidArgument("--max-nodes: must be positive, got " + std::to_string(o.max_nodes));
  Set(vm, "partition", &o.partition);
  Set(vm, "account", &o.account);
  Set(vm, "cpus-per-task", &o.cpus_per_task);
  Set(vm, "master-port", &o.master_port);
  Set(vm, "join-timeout", &o.join_timeout_s);
  Set(vm, "teacher-nodes", &o.teacher_nodes);
  Set(vm, "model-path", &o.model_path);
  Set(vm, "teacher-path", &o.teacher_path);
  Set(vm, "train-files", &o.train_files);
  Set(vm, "val-files", &o.val_files);
  Set(vm, "image", &o.image);
  Set(vm, "kimi-plan", &o.kimi_plan);
  if (o.target == LaunchTarget::kLocal && vm.count("out"))
    return Status::InvalidArgument("--out: the local target runs here and writes no files");
  return o;
}

// Opening a missing store would create an empty one; a launch only reads.
Status CheckStoreExists(const po::variables_map& vm, const CliEnv& env) {
  if (!vm.count("plan")) return Status::Ok();
  if (vm.count("preset")) return Status::InvalidArgument("--plan: give --plan or --preset, not both");
  const std::string db = vm["db"].as<std::string>();
  if (!env.fs.Exists(db))
    return Status::InvalidArgument("--db: " + db + " does not exist; `kimi-plan plan` records plans there");
  return Status::Ok();
}

Result<VerlKeys> LoadVerlKeys(const LaunchOptions& o, const CliEnv& env) {
  if (o.engine != LaunchEngine::kVerl) return VerlKeys();
  KP_ASSIGN_OR_RETURN(std::string text, env.fs.ReadFile(env.data.verl_keys, limits::kMaxSpecFileBytes));
  return VerlKeys::Parse(text, env.data.verl_keys);
}

std::string CommandLine(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

// Runs the start command; a non-zero exit is the command's failure, named.
Result<int> Start(const std::vector<std::string>& argv, const char* flag, const CliEnv& env) {
  if (!env.processes) return Status::Internal("no process launcher in this environment");
  KP_ASSIGN_OR_RETURN(int code, env.processes->Run(argv));
  if (code != 0)
    return Status::IoError(std::string(flag) + ": `" + CommandLine(argv) + "` exited with code " + std::to_string(code));
  return code;
}

json ResultJson(const Launch& l, const LaunchArtifacts& a, const po::variables_map& vm, bool started) {
  json files = json::array();
  for (const JobFile& f : a.files) files.push_back(f.path);
  json violations = l.evaluation.violations;
  return {{"schema", "kimi-plan.launch/1"},
          {"target", LaunchTargetName(l.options.target)},
          {"engine", LaunchEngineName(l.options.engine)},
          {"label", l.options.label},
          {"plan_id", vm.count("plan") ? json(vm["plan"].as<std::int64_t>()) : json(nullptr)},
          {"preset", vm.count("preset") ? json(vm["preset"].as<std::string>()) : json(nullptr)},
          {"feasible", l.evaluation.feasible()},
          {"violations", violations},
          {"forced", !l.evaluation.feasible()},
          {"nodes", l.request.nodes},
          {"teacher_nodes", l.teacher_nodes()},
          {"job_nodes", l.job_nodes()},
          {"gpus_per_node", l.request.gpus_per_node},
          {"gpus", l.job_nodes() * l.request.gpus_per_node},
          {"files", files},
          {"start_command", a.start_command},
          {"started", started}};
}

void PrintSummary(std::ostream& out, const Launch& l, const LaunchArtifacts& a, bool started) {
  const PlanRequest& r = l.request;
  out << "kimi-plan launch: " << l.options.label << " on " << LaunchTargetName(l.options.target) << ", engine "
      << LaunchEngineName(l.options.engine) << "\n"
      << "plan      " << r.model.name << ", " << r.nodes << " x " << r.gpus_per_node << " " << r.gpu.name << " = "
      << r.world() << " GPUs" << (l.teacher_nodes() ? " + " + std::to_string(l.teacher_nodes()) + " teacher node(s)" : "")
      << "; " << LayoutLine(l.plan()) << "\n"
      << "verdict   "
      << (l.evaluation.feasible() ? std::string("FITS") : "DOES NOT FIT (" + l.evaluation.violations.front() +
                                                            "), launched with --force")
      << "\n";
  for (const JobFile& f : a.files) out << "wrote     " << f.path << "\n";
  out << (started ? "started   " : "start it  ") << CommandLine(a.start_command) << "\n";
}

}  // namespace

Status LaunchCommand(const std::vector<std::string>& args, CliEnv& env) {
  const po::options_description desc = LaunchOptionsDesc();
  po::variables_map vm;
  KP_ASSIGN_OR_RETURN(const bool proceed, ParseCommand(args, desc, &vm, env.out));
  if (!proceed) return Status::Ok();
  KP_ASSIGN_OR_RETURN(LaunchOptions options, OptionsFromFlags(vm));
  KP_RETURN_IF_ERROR(CheckEngineTarget(options));
  KP_RETURN_IF_ERROR(CheckOutputDirectory(vm, env, "out"));
  KP_RETURN_IF_ERROR(CheckStoreExists(vm, env));
  KP_ASSIGN_OR_RETURN(PricedPlan plan, LoadPlan(vm, env));
  KP_ASSIGN_OR_RETURN(VerlKeys keys, LoadVerlKeys(options, env));
  const std::string out_dir = vm.count("out") ? vm["out"].as<std::string>() : "launch/" + options.label;
  options.job_dir = out_dir;
  if (vm.count("plan")) options.plan_id = vm["plan"].as<std::int64_t>();
  const Launch launch{plan.request, plan.evaluation, options};
  KP_ASSIGN_OR_RETURN(LaunchArtifacts artifacts, BuildLaunch(launch, keys, out_dir, env.program));

  for (const JobFile& f : artifacts.files) KP_RETURN_IF_ERROR(env.fs.WriteFile(f.path, f.contents));
  const bool local = options.target == LaunchTarget::kLocal;
  const bool start = local || vm.count("submit");
  if (local && !vm.count("json")) env.out << "running   " << CommandLine(artifacts.start_command) << std::endl;
  if (start) KP_RETURN_IF_ERROR(Start(artifacts.start_command, local ? "--target local" : "--submit", env).status());

  if (vm.count("json")) env.out << ResultJson(launch, artifacts, vm, start).dump(2) << "\n";
  else PrintSummary(env.out, launch, artifacts, start);
  return Status::Ok();
}

}  // namespace kp
