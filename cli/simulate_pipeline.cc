// `kimi-plan simulate pipeline`: one step of a pipeline schedule on the
// discrete-event core, with explicit costs or with a plan's.
#include "cli/simulate_commands.h"
#include "cli/output_paths.h"
#include "common/limits.h"
#include "common/table.h"
#include "planner/schedule_model.h"
#include "schedules/attnres_transport.h"
#include "simulator/gantt.h"
#include "simulator/pipeline_sim.h"
#include "schedules/schedule_generators.h"

namespace kp {

namespace {

using nlohmann::json;

po::options_description PipelineOptions() {
  po::options_description desc(
      "kimi-plan simulate pipeline --schedule S --pp P [--vp V] --microbatches M --f-us F --b-us B --w-us W --p2p-us C\n"
      "kimi-plan simulate pipeline --plan ID | --preset NAME [plan options] [--attnres-cache on|off]\n\n"
      "Runs one step of a pipeline schedule: F, B and W are one micro-batch's forward, input-backward and\n"
      "weight-backward through all the layers one rank holds; C one stage-to-stage transfer. A step costs the\n"
      "makespan (--optimizer-sync sync) or the longest rank's span (post-validation). Options");
  desc.add_options()("help,h", "this text")
      ("microbatches", IntFlag(1, limits::kMaxMicrobatches), "micro-batches per step (explicit costs)")
      ("f-us", NumberFlag(0, limits::kMaxMicroseconds), "forward, microseconds")("b-us", NumberFlag(0, limits::kMaxMicroseconds), "input backward, microseconds")
      ("w-us", NumberFlag(0, limits::kMaxMicroseconds), "weight backward, microseconds")
      ("p2p-us", NumberFlag(0, limits::kMaxMicroseconds), "one stage-to-stage transfer, microseconds")
      ("schedule-csv", po::value<std::string>(), "run this per-rank action list (torch's _dump_csv format) instead")
      ("stage-to-rank", po::value<std::string>()->default_value("loop"), "with --schedule-csv: loop | v")
      ("stages", IntFlag(1, limits::kMaxPipelineRanks * 2), "with --schedule-csv: number of stages (default pp x vp)")
      ("attnres-cache", po::value<std::string>()->default_value("on"),
       "with a plan of a model with attention residuals: on (PR #4312's rank cache) | off (whole stack)")
      ("out", po::value<std::string>(), "write pipeline.svg, pipeline.html and schedule.csv to this directory");
  AddPlanSourceOptions(desc);
  AddOutputOptions(desc);
  return desc;
}

Nanoseconds Us(const po::variables_map& vm, const char* k) {
  return Nanoseconds(static_cast<std::int64_t>(vm[k].as<double>() * 1000 + 0.5));
}

bool HasPlanSource(const po::variables_map& vm) {
  for (const char* k : {"plan", "preset", "topology-file", "model", "model-file", "hidden"})
    if (vm.count(k)) return true;
  return false;
}

/// What to simulate: the schedule, its costs and the per-hop transfer times.
struct PipelineInput {
  PipelineSchedule schedule;
  StageCosts costs;
  PipelineSimOptions options;
  std::int64_t plan_id = 0;
  json request;
};

// --optimizer-sync if given, else `fallback` (the request's or the schedule's default).
Result<OptimizerSync> SyncFromFlags(const po::variables_map& vm, OptimizerSync fallback) {
  if (!vm.count("optimizer-sync")) return fallback;
  return ParseOptimizerSync(vm["optimizer-sync"].as<std::string>());
}

Result<SendMode> SendModeFromFlags(const po::variables_map& vm, SendMode fallback) {
  if (!vm.count("p2p")) return fallback;
  return ParseSendMode(vm["p2p"].as<std::string>());
}

Result<PipelineSchedule> ScheduleFromFlags(const po::variables_map& vm, ScheduleKind kind, int pp, int vp, int m,
                                           const CliEnv& env) {
  if (!vm.count("schedule-csv")) return GenerateSchedule(kind, pp, vp, m);
  Result<std::string> text = env.fs.ReadFile(vm["schedule-csv"].as<std::string>(), limits::kMaxSpecFileBytes);
  if (!text.ok()) return text.status().WithContext("--schedule-csv");
  const int stages = vm.count("stages") ? vm["stages"].as<int>() : pp * vp;
  return ParseCsv(*text, stages, m, vm["stage-to-rank"].as<std::string>());
}

Result<PipelineInput> FromExplicitCosts(const po::variables_map& vm, const CliEnv& env) {
  for (const char* k : {"schedule", "pp", "microbatches", "f-us", "b-us", "w-us", "p2p-us"})
    if (!vm.count(k))
      return Status::InvalidArgument(std::string("--") + k + ": required (or price a plan with --plan / --preset)");
  KP_ASSIGN_OR_RETURN(ScheduleKind kind, ParseSchedule(vm["schedule"].as<std::string>()));
  const int pp = vm["pp"].as<int>(), vp = vm.count("vp") ? vm["vp"].as<int>() : 1, m = vm["microbatches"].as<int>();
  PipelineInput in;
  in.costs = {Us(vm, "f-us"), Us(vm, "b-us"), Us(vm, "w-us"), Us(vm, "p2p-us")};
  for (const auto& [k, v] : {std::pair{"--f-us", in.costs.f}, {"--b-us", in.costs.b}, {"--w-us", in.costs.w},
                             {"--p2p-us", in.costs.p2p}})
    if (v.value() < 0) return Status::InvalidArgument(std::string(k) + ": must be >= 0");
  KP_ASSIGN_OR_RETURN(in.options.optimizer_sync, SyncFromFlags(vm, DefaultOptimizerSync(kind)));
  KP_ASSIGN_OR_RETURN(in.options.send_mode, SendModeFromFlags(vm, SendMode::kAsync));
  KP_ASSIGN_OR_RETURN(in.schedule, ScheduleFromFlags(vm, kind, pp, vp, m, env));
  in.request = {{"schedule", ScheduleName(kind)}, {"pp", pp}, {"vp", vp}, {"microbatches", m},
                {"optimizer_sync", OptimizerSyncName(in.options.optimizer_sync)},
                {"p2p", SendModeName(in.options.send_mode)}, {"f_us", vm["f-us"].as<double>()}, {"b_us", vm["b-us"].as<double>()},
                {"w_us", vm["w-us"].as<double>()}, {"p2p_us", vm["p2p-us"].as<double>()},
                {"schedule_csv", vm.count("schedule-csv") ? json(vm["schedule-csv"].as<std::string>()) : json(nullptr)}};
  return in;
}

// A plan's F, B and W come from the planner's critical rank; a hop's time is
// its bytes (the hidden state, plus the attention-residual entries on it)
// over the link between two pipeline ranks.
Result<PipelineInput> FromPlan(const po::variables_map& vm, const CliEnv& env) {
  KP_ASSIGN_OR_RETURN(PricedPlan plan, LoadPlan(vm, env));
  const PlanRequest& req = plan.request;
  const ParallelPlan& p = plan.evaluation.plan;
  if (p.pp < 2) return Status::InvalidArgument("--pp: the plan has no pipeline (pp = 1); nothing to simulate");
  const std::string cache_flag = vm["attnres-cache"].as<std::string>();
  if (cache_flag != "on" && cache_flag != "off")
    return Status::InvalidArgument("--attnres-cache: must be on or off, got \"" + cache_flag + "\"");
  PipelineInput in;
  in.plan_id = plan.plan_id;
  const StepTime& st = plan.evaluation.step;
  in.costs = {ToNanoseconds(st.f), ToNanoseconds(st.b), ToNanoseconds(st.w), Nanoseconds(0)};
  // The plan derives the micro-batches from --global-batch: bound the work under that name.
  KP_RETURN_IF_ERROR(CheckPipelineWork(req.schedule, p.pp, p.vp, st.microbatches, "--global-batch"));
  KP_ASSIGN_OR_RETURN(in.schedule, GenerateSchedule(req.schedule, p.pp, p.vp, st.microbatches));
  KP_ASSIGN_OR_RETURN(in.options.optimizer_sync, SyncFromFlags(vm, req.step_sync()));
  KP_ASSIGN_OR_RETURN(in.options.send_mode, SendModeFromFlags(vm, req.p2p()));
  const double tokens = double(req.seq_length()) * req.micro_batch / p.cp;
  const Bytes hidden(tokens * req.model.hidden * 2.0 / (req.sequence_parallel ? p.tp : 1));
  // Pipeline neighbours sit tp x cp x dp ranks apart: on other nodes unless
  // all of that fits in one.
  const bool same_node = p.tp * p.cp * p.dp * 2 <= req.gpus_per_node;
  const BytesPerSecond link = (same_node ? req.gpu.nvlink : req.gpu.gpu_rdma()) * req.efficiency.comm;
  const bool attnres = req.model.attn_res_block > 0;
  in.costs.p2p = ToNanoseconds(TransferTime(hidden, link));
  if (attnres && cache_flag == "on" && ScheduleIsVShaped(req.schedule))
    return Status::InvalidArgument(std::string("--attnres-cache: ") + ScheduleName(req.schedule) +
                                   " places stages V-style, the rank cache needs stage s on rank s % pp; use --attnres-cache off");
  if (attnres) {
    KP_ASSIGN_OR_RETURN(AttnResTransport t, ComputeAttnResTransport(req.model.layers, req.model.attn_res_block,
                                                                   plan.evaluation.split, p.pp));
    const bool cache = cache_flag == "on";
    in.options.transfer = [t, cache, hidden, link](int from, int to, int, bool backward) {
      const int hop = backward ? to : from;  // the forward hop hop -> hop + 1, in either direction
      return ToNanoseconds(TransferTime(HopBytes(t, hop, cache, hidden, hidden), link));
    };
  }
  in.request = {{"plan_id", plan.plan_id ? json(plan.plan_id) : json(nullptr)},
                {"schedule", ScheduleName(req.schedule)}, {"pp", p.pp}, {"vp", p.vp},
                {"microbatches", st.microbatches}, {"optimizer_sync", OptimizerSyncName(in.options.optimizer_sync)},
                {"p2p", SendModeName(in.options.send_mode)}, {"f_us", st.f.value() * 1e6}, {"b_us", st.b.value() * 1e6},
                {"w_us", st.w.value() * 1e6}, {"p2p_us", ToSeconds(in.costs.p2p).value() * 1e6},
                {"attnres_cache", attnres ? json(cache_flag) : json(nullptr)}};
  return in;
}

json ResultJson(const PipelineSimResult& r, double wall_s) {
  json idle = json::array(), span = json::array(), spans = json::array();
  for (Nanoseconds n : r.idle_per_rank) idle.push_back(n.value() / 1e3);
  for (Nanoseconds n : r.span_idle_per_rank) span.push_back(n.value() / 1e3);
  for (Nanoseconds n : r.span_per_rank) spans.push_back(n.value() / 1e3);
  return {{"schema", "kimi-plan.pipeline/1"}, {"makespan_us", r.makespan.value() / 1e3},
          {"optimizer_sync", OptimizerSyncName(r.optimizer_sync)}, {"step_us", r.step.value() / 1e3},
          {"bubble_fraction", r.bubble_fraction}, {"peak_inflight", r.peak_inflight},
          {"idle_per_rank_us", idle}, {"span_per_rank_us", spans}, {"span_idle_per_rank_us", span},
          {"events", r.events}, {"wall_s", wall_s}};
}

void PrintPipeline(std::ostream& out, std::int64_t id, const PipelineInput& in, const PipelineSimResult& r) {
  const PipelineSchedule& s = in.schedule;
  out << "kimi-plan simulate pipeline #" << id << ": " << s.name << ", pp " << s.pp << " x " << s.StagesPerRank()
      << " stages per rank, " << s.microbatches << " micro-batches, " << SendModeName(in.options.send_mode)
      << " sends\n\n";
  Table t({"rank", "idle us", "idle inside its span us", "peak in flight"});
  for (int rank = 0; rank < s.pp; ++rank)
    t.AddRow({std::to_string(rank), FormatFixed(r.idle_per_rank[rank].value() / 1e3, 1),
              FormatFixed(r.span_idle_per_rank[rank].value() / 1e3, 1), std::to_string(r.peak_inflight[rank])});
  const bool post = r.optimizer_sync == OptimizerSync::kPostValidation;
  out << t.Render() << "\nstep      " << FormatFixed(r.step.value() / 1e3, 1) << " us ("
      << (post ? "post-validation: the longest rank span" : "sync: the makespan") << "), bubble "
      << FormatFixed(100 * r.bubble_fraction, 2) << "%\nmakespan  " << FormatFixed(r.makespan.value() / 1e3, 1)
      << " us, " << r.events << " events\n";
}

void PrintCriticalPath(std::ostream& out, const nlohmann::json& result) {
  const json& path = result["critical_path"];
  out << "critical  " << path.size() << " compute actions, " << FormatFixed(result["critical_path_us"].get<double>(), 1)
      << " us:";
  const size_t shown = std::min<size_t>(path.size(), 12);
  for (size_t i = 0; i < shown; ++i) out << " " << path[i].get<std::string>();
  if (shown < path.size()) out << " ... " << path.back().get<std::string>();
  out << "\n";
}

}  // namespace

Status SimulatePipelineCommand(const std::vector<std::string>& args, CliEnv& env) {
  const po::options_description desc = PipelineOptions();
  po::variables_map vm;
  KP_ASSIGN_OR_RETURN(const bool proceed, ParseCommand(args, desc, &vm, env.out));
  if (!proceed) return Status::Ok();
  KP_RETURN_IF_ERROR(CheckOutputDirectory(vm, env, "out"));
  KP_ASSIGN_OR_RETURN(PipelineInput in, HasPlanSource(vm) ? FromPlan(vm, env) : FromExplicitCosts(vm, env));
  in.options.record_timeline = vm.count("out") > 0;
  Stopwatch watch;
  KP_ASSIGN_OR_RETURN(PipelineSimResult r, SimulatePipeline(in.schedule, in.costs, in.options));
  json result = ResultJson(r, watch.Seconds());
  KP_ASSIGN_OR_RETURN(CriticalPathResult path,
                      CriticalPath(in.schedule, CostsPerAction(in.costs, in.schedule.StagesPerRank()),
                                   in.options.transfer ? in.options.transfer
                                                       : TransferCost([p2p = in.costs.p2p](int, int, int, bool) { return p2p; })));
  json actions = json::array();
  for (const ScheduledAction& a : path.actions)
    if (IsCompute(a.action.type)) actions.push_back(a.action.ToString());
  result["critical_path_us"] = path.length.value() / 1e3;
  result["critical_path"] = actions;
  if (vm.count("out")) {
    const std::string dir = vm["out"].as<std::string>();
    KP_RETURN_IF_ERROR(env.fs.WriteFile(dir + "/pipeline.svg", GanttSvg(r, in.schedule)));
    KP_RETURN_IF_ERROR(env.fs.WriteFile(dir + "/pipeline.html", GanttHtml(r, in.schedule)));
    KP_RETURN_IF_ERROR(env.fs.WriteFile(dir + "/schedule.csv", ToCsv(in.schedule)));
  }
  return RecordAndReport(vm, env, "pipeline", in.plan_id, in.request, result, [&](std::int64_t id) {
    PrintPipeline(env.out, id, in, r);
    PrintCriticalPath(env.out, result);
  });
}

}  // namespace kp
