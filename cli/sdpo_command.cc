// `kimi-plan sdpo`: the SDPO loop run for real (runtime/sdpo_loop.h), every
// step logged to the store, progress on stderr, and at the end the reward
// curve and the measured step breakdown beside the simulator's prediction
// for the same placement and costs (simulator/sdpo_loop.h). With
// --placement split and no RANK in the environment it is the local launcher
// of the split placement's ranks (--pp actor ranks, the teacher unless the
// loss is GRPO, --rollout-ranks rollout ranks); with RANK set it is one rank.
#include <algorithm>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/log.h"
#include "cli/local_ranks.h"
#include "cli/options.h"
#include "common/limits.h"
#include "cli/run_status.h"
#include "cli/runtime_options.h"
#include "common/stats.h"
#include "common/table.h"
#include "runtime/model/runtime_config.h"
#include "runtime/comm/device_check.h"
#include "runtime/sdpo/sdpo_loop.h"
#include "simulator/sdpo_loop.h"
#include "store/store.h"

namespace kp {

namespace {

using nlohmann::json;
using runtime::LoopStepMetrics;
using runtime::SdpoConfig;

// The loop's training defaults: a gentler constant learning rate than a
// pretraining run's, with no warmup (the loop starts from a trained actor).
runtime::TrainConfig LoopTrainDefaults() {
  runtime::TrainConfig c;
  c.steps = 50;
  c.lr = 1e-3;
  c.warmup = 0;
  c.min_lr_ratio = 1.0;
  c.bias_update_rate = 0;
  return c;
}

po::options_description SdpoOptions() {
  po::options_description desc(
      "kimi-plan sdpo [options]\n\n"
      "Runs the SDPO loop: rollout (sampling with a KV cache), feedback (a verifier), the EMA\n"
      "self-teacher scoring each response after a reprompt, the actor's step and the weight\n"
      "sync, every step logged to the store. Options");
  AddScaledModelOptions(desc);
  desc.add_options()("help,h", "this text")
      ("task", po::value<std::string>()->default_value("arithmetic"),
       "arithmetic | addition | subtraction | multiplication | sorting | a JSON Lines task file")
      ("min-digits", IntFlag(1, 18)->default_value(1), "built-in tasks: digits per operand, at least")
      ("max-digits", IntFlag(1, 18)->default_value(3), "built-in tasks: digits per operand, at most")
      ("prompts", IntFlag(1, limits::kMaxBatch)->default_value(8), "prompts per step")
      ("samples", IntFlag(1, limits::kMaxBatch)->default_value(8), "responses per prompt (the group)")
      ("temperature", NumberFlag(0, 100, /*min_open=*/true)->default_value(1.0), "sampling temperature (> 0)")
      ("top-p", NumberFlag(0, 1, /*min_open=*/true)->default_value(1.0), "nucleus sampling mass, in (0, 1]")
      ("max-new-tokens", IntFlag(1, limits::kMaxSequence)->default_value(8), "longest response")
      ("max-context", IntFlag(16, limits::kMaxSequence)->default_value(4096),
       "the loop's context in tokens: a task file whose longest teacher context plus response is longer is refused")
      ("loss", po::value<std::string>()->default_value("sdpo"), "sdpo | grpo | k1-opd")
      ("distill-top-k", IntFlag(0, limits::kMaxVocab)->default_value(100), "SDPO: the student's top-k support (0: all)")
      ("alpha", NumberFlag(0, 1)->default_value(0.5), "SDPO: 0 forward KL, 1 reverse KL, between: skewed JS")
      ("is-clip", NumberFlag(0, 1e6)->default_value(2.0), "SDPO: importance-ratio clip (0: off)")
      ("clip-ratio", NumberFlag(0, 1e3)->default_value(0.2), "GRPO / k1-opd: PPO ratio clip")
      ("reprompt", po::value<std::string>()->default_value("reference"), "reference | compact: the teacher's templates")
      ("teacher-ema", NumberFlag(0, 1)->default_value(0.05), "self-teacher EMA rate per step")
      ("sft-steps", IntFlag(0, limits::kMaxTrainSteps)->default_value(0), "supervised warm-start steps before the loop")
      ("sft-batch", IntFlag(1, limits::kMaxBatch)->default_value(32), "warm-start examples per step")
      ("sft-lr", NumberFlag(0, 10, /*min_open=*/true)->default_value(1e-3), "warm-start learning rate (constant)")
      ("sft-context-share", NumberFlag(0, 1)->default_value(0.5), "warm-start examples in the teacher's context format")
      ("lora-rank", IntFlag(0, limits::kMaxHidden)->default_value(0), "LoRA rank for the loop (0: full weights); the sync then moves adapters")
      ("lora-alpha", NumberFlag(0, 1e6, /*min_open=*/true), "LoRA alpha (default 2 x rank)")
      ("placement", po::value<std::string>()->default_value("colocated"), "colocated | split")
      ("rollout-ranks", IntFlag(1, limits::kMaxLocalRanks)->default_value(1), "split: rollout processes")
      ("pp", IntFlag(1, limits::kMaxPipelineRanks)->default_value(1), "split: the actor's pipeline ranks")
      ("vp", IntFlag(1, limits::kMaxLayers)->default_value(1), "split: pipeline stages per actor rank (interleaved schedules)")
      ("microbatches", IntFlag(1, limits::kMaxMicrobatches)->default_value(1), "micro-batches per actor step (divides --prompts x --samples)")
      ("schedule", po::value<std::string>()->default_value("1f1b"), "the actor's pipeline schedule (as `simulate pipeline`)")
      ("attnres-cache", po::value<std::string>()->default_value("off"), "on | off: the actor pipeline's cached AttnRes transport")
      ("sync-bucket-mb", NumberFlag(0, 1048576, /*min_open=*/true)->default_value(16), "weight-sync bucket size, MiB")
      ("rollout-experts", po::value<std::string>()->default_value("same"),
       "same | int4: the rollouts' routed experts as the actor holds them, or as released INT4 (groups of 32,\n"
       "bf16 scales; full syncs quantise them on the actor)")
      ("dtype", po::value<std::string>()->default_value("fp32"), "fp32 | bf16 (activations; fp32 master weights)")
      ("deterministic", po::value<std::string>()->default_value("on"), "on | off: deterministic algorithms")
      ("backend", po::value<std::string>()->default_value("auto"), "split: auto | gloo | nccl")
      ("timeout-s", IntFlag(1, 86400)->default_value(120), "split: seconds a rank waits for a peer before failing")
      ("print-config", "print the loop's whole configuration as JSON (what the run records and\n"
                       "kimi-plan-sdpo-bench --config reads) and exit without running");
  AddTrainOptions(desc, LoopTrainDefaults(), /*steps_required=*/false, /*log_every=*/1);
  AddOutputOptions(desc);
  return desc;
}

Result<SdpoConfig> BuildSdpoConfig(const po::variables_map& vm, const CliEnv& env) {
  SdpoConfig c;
  c.train = LoopTrainDefaults();
  KP_ASSIGN_OR_RETURN(c.train.model, ResolveScaledModel(vm, env));
  KP_RETURN_IF_ERROR(ReadTrainOptions(vm, &c.train));
  c.train.lora.rank = vm["lora-rank"].as<int>();
  c.train.lora.alpha = vm.count("lora-alpha") ? vm["lora-alpha"].as<double>() : 2.0 * c.train.lora.rank;
  KP_ASSIGN_OR_RETURN(c.train.options.dtype, runtime::ParseDType(vm["dtype"].as<std::string>()));
  KP_ASSIGN_OR_RETURN(c.train.deterministic, OnOff(vm, "deterministic", true));
  c.task = vm["task"].as<std::string>();
  c.task_options.min_digits = vm["min-digits"].as<int>();
  c.task_options.max_digits = vm["max-digits"].as<int>();
  c.task_options.seed = c.train.seed;
  if (c.task != "sorting" && c.task_options.max_digits < c.task_options.min_digits)
    return Status::InvalidArgument("--max-digits: must be at least --min-digits");
  c.prompts = vm["prompts"].as<int>();
  c.max_context = vm["max-context"].as<int>();
  c.sampling.samples = vm["samples"].as<int>();
  c.sampling.temperature = vm["temperature"].as<double>();
  c.sampling.top_p = vm["top-p"].as<double>();
  c.sampling.max_new_tokens = vm["max-new-tokens"].as<int>();
  KP_ASSIGN_OR_RETURN(c.loss, runtime::ParseLossMode(vm["loss"].as<std::string>()));
  c.distill.top_k = vm["distill-top-k"].as<int>();
  c.distill.alpha = vm["alpha"].as<double>();
  c.distill.is_clip = vm["is-clip"].as<double>();
  c.clip.low = c.clip.high = vm["clip-ratio"].as<double>();
  KP_ASSIGN_OR_RETURN(c.reprompt.text, runtime::ParseRepromptTemplate(vm["reprompt"].as<std::string>()));
  c.teacher_ema = vm["teacher-ema"].as<double>();
  c.sft_steps = vm["sft-steps"].as<int>();
  c.sft_batch = vm["sft-batch"].as<int>();
  c.sft_lr = vm["sft-lr"].as<double>();
  c.sft_context_share = vm["sft-context-share"].as<double>();
  KP_ASSIGN_OR_RETURN(c.placement, runtime::ParsePlacement(vm["placement"].as<std::string>()));
  c.rollout_ranks = vm["rollout-ranks"].as<int>();
  c.actor.pp = vm["pp"].as<int>();
  c.actor.vp = vm["vp"].as<int>();
  c.actor.microbatches = vm["microbatches"].as<int>();
  c.actor.schedule = vm["schedule"].as<std::string>();
  KP_ASSIGN_OR_RETURN(c.actor.attnres_cache, OnOff(vm, "attnres-cache", false));
  const double bucket_mb = vm["sync-bucket-mb"].as<double>();
  if (!(bucket_mb > 0)) return Status::InvalidArgument("--sync-bucket-mb: must be positive");
  c.sync_bucket_bytes = static_cast<std::int64_t>(bucket_mb * 1024 * 1024);
  const std::string rollout_experts = vm["rollout-experts"].as<std::string>();
  if (rollout_experts != "same" && rollout_experts != "int4")
    return Status::InvalidArgument("--rollout-experts: must be same or int4, got \"" + rollout_experts + "\"");
  c.rollout_int4_experts = rollout_experts == "int4";
  KP_RETURN_IF_ERROR(runtime::ValidateSdpoConfig(c));
  // A bad task file is refused here, before the store records a run.
  KP_RETURN_IF_ERROR(runtime::MakeTaskSource(env.fs, c.task, c.task_options).status());
  return c;
}

// Rank 0's observer: the store, the progress lines and what the summary needs.
class StoreObserver : public runtime::LoopObserver {
 public:
  StoreObserver(const SdpoConfig& c, Store& store, std::int64_t run_id, int log_every, const CliEnv& env)
      : c_(c), store_(store), run_id_(run_id), log_every_(log_every), env_(env) {}

  Status OnStart(std::int64_t parameters, std::int64_t trainable, const std::string& task) override {
    parameters_ = parameters;
    std::ostringstream line;
    line << "sdpo run #" << run_id_ << ": " << c_.train.model.name << ", " << FormatCount(parameters)
         << " parameters, " << runtime::PlacementName(c_.placement) << ", loss " << runtime::LossModeName(c_.loss)
         << ", " << c_.prompts << " prompts x " << c_.sampling.samples << " samples per step, task " << task
         << (c_.train.lora.enabled() ? ", LoRA rank " + std::to_string(c_.train.lora.rank) + " after the warm start"
                                     : std::string());
    Progress(env_, line.str());
    return Status::Ok();
  }

  Status OnWarmStart(int step, int steps, double loss) override {
    std::ostringstream line;
    line << "warm start " << std::setw(5) << step << "/" << steps << "  loss " << FormatFixed(loss, 4);
    Progress(env_, line.str());
    return Status::Ok();
  }

  Status OnInitialSync(const LoopStepMetrics& s) override {
    pending_.push_back({s.sync_version, s.sync_mode, s.sync_bytes, s.sync_buckets, s.sync_s});
    return Status::Ok();
  }

  Status OnStep(const LoopStepMetrics& m) override {
    StepRecord step{run_id_, m.train.step, m.train.loss, m.train.grad_norm, m.train.lr, m.train.tokens_per_s,
                    m.train.step_seconds, m.train.peak_memory_bytes, ""};
    LoopStepRecord loop;
    loop.step = m.train.step;
    loop.weight_version = m.weight_version;
    loop.reward_mean = m.reward_mean;
    loop.distill_loss = m.distill_loss;
    loop.pg_loss = m.pg_loss;
    loop.response_tokens_mean = m.response_tokens_mean;
    loop.generated_tokens = m.generated_tokens;
    loop.generation_s = m.generation_s;
    loop.generation_tokens_per_s = m.generation_s > 0 ? m.generated_tokens / m.generation_s : 0;
    loop.feedback_s = m.feedback_s;
    loop.teacher_s = m.teacher_s;
    loop.train_s = m.train_s;
    loop.wait_s = m.wait_s;
    loop.sync_s = m.sync_s;
    loop.sync_bytes = m.sync_bytes;
    if (m.sync_version >= 0) pending_.push_back({m.sync_version, m.sync_mode, m.sync_bytes, m.sync_buckets, m.sync_s});
    KP_RETURN_IF_ERROR(store_.AppendLoopStep(step, loop, pending_));
    pending_.clear();
    steps_.push_back(m);
    if (m.train.step == 1 || m.train.step % log_every_ == 0 || m.train.step == c_.train.steps)
      Progress(env_, ProgressLine(m));
    return Status::Ok();
  }

  const std::vector<LoopStepMetrics>& steps() const { return steps_; }
  std::int64_t parameters() const { return parameters_; }

 private:
  std::string ProgressLine(const LoopStepMetrics& m) const {
    std::ostringstream o;
    o << "step " << std::setw(4) << m.train.step << "/" << c_.train.steps << "  reward " << FormatFixed(m.reward_mean, 3)
      << "  loss " << FormatFixed(m.train.loss, 4) << "  len " << FormatFixed(m.response_tokens_mean, 1) << "  gen "
      << FormatFixed(m.generation_s > 0 ? m.generated_tokens / m.generation_s : 0, 0) << " tok/s  teacher "
      << FormatFixed(m.teacher_s, 3) << " s  sync " << FormatFixed(m.sync_s, 3) << " s "
      << FormatFixed(m.sync_bytes / 1e6, 2) << " MB  | " << Printable(m.sample_text);
    return o.str();
  }

  static std::string Printable(const std::string& s) {
    std::string out;
    for (char ch : s) out += (ch >= 32 && ch < 127) ? ch : '?';
    return out;
  }

  const SdpoConfig& c_;
  Store& store_;
  std::int64_t run_id_;
  int log_every_;
  const CliEnv& env_;
  std::int64_t parameters_ = 0;
  std::vector<WeightSyncRecord> pending_;
  std::vector<LoopStepMetrics> steps_;
};

// The steady-state breakdown: medians over the steps after the first (which
// pays one-off costs); the sync's over the steps that made one.
struct Breakdown {
  double generation = 0, feedback = 0, teacher = 0, train = 0, sync = 0, wait = 0, step = 0;
};

Breakdown MeasuredBreakdown(const std::vector<LoopStepMetrics>& steps) {
  std::vector<double> g, f, t, tr, s, w, st;
  for (std::size_t i = steps.size() > 1 ? 1 : 0; i < steps.size(); ++i) {
    g.push_back(steps[i].generation_s);
    f.push_back(steps[i].feedback_s);
    t.push_back(steps[i].teacher_s);
    tr.push_back(steps[i].train_s);
    if (steps[i].sync_version >= 0) s.push_back(steps[i].sync_s);
    w.push_back(steps[i].wait_s);
    st.push_back(steps[i].train.step_seconds);
  }
  return {Median(g), Median(f), Median(t), Median(tr), Median(s), Median(w), Median(st)};
}

// The simulator's loop, priced with the measured medians.
Result<LoopResult> PredictedLoop(const SdpoConfig& c, const Breakdown& b) {
  LoopCosts costs;
  costs.rollout = Seconds(b.generation);
  costs.feedback = Seconds(b.feedback);
  costs.teacher = Seconds(b.teacher);
  costs.train = Seconds(b.train);
  costs.sync = Seconds(b.sync);
  LoopOptions o;
  o.placement = c.placement == runtime::Placement::kSplit ? LoopPlacement::kSplit : LoopPlacement::kColocated;
  o.actor_gpus = c.actor.pp;
  o.rollout_gpus = c.rollout_ranks;
  o.steps = std::max(3, c.train.steps);
  o.off_policy_overlap = c.placement == runtime::Placement::kSplit;
  return SimulateLoop(costs, o);
}

std::vector<double> Rewards(const std::vector<LoopStepMetrics>& steps) {
  std::vector<double> r;
  for (const auto& m : steps) r.push_back(m.reward_mean);
  return r;
}

// The reward curve in at most ten points: the mean of each tenth of the steps.
std::vector<double> RewardCurve(const std::vector<double>& r) {
  std::vector<double> out;
  const std::size_t parts = std::min<std::size_t>(10, r.size());
  for (std::size_t p = 0; p < parts; ++p) out.push_back(MeanOf(r, p * r.size() / parts, (p + 1) * r.size() / parts));
  return out;
}

Status PrintSummary(const SdpoConfig& c, const StoreObserver& obs, std::int64_t run_id, bool as_json,
                    std::ostream& out) {
  const std::vector<double> rewards = Rewards(obs.steps());
  const std::size_t n = rewards.size(), tenth = std::max<std::size_t>(1, n / 10);
  const Breakdown m = MeasuredBreakdown(obs.steps());
  KP_ASSIGN_OR_RETURN(const LoopResult predicted, PredictedLoop(c, m));
  const std::vector<double> curve = RewardCurve(rewards);
  const double first = MeanOf(rewards, 0, tenth), last = MeanOf(rewards, n - tenth, n);
  if (as_json) {
    json j = {{"run_id", run_id},
              {"model", c.train.model.name},
              {"parameters", obs.parameters()},
              {"placement", runtime::PlacementName(c.placement)},
              {"loss", runtime::LossModeName(c.loss)},
              {"steps", n},
              {"first_tenth_reward", first},
              {"last_tenth_reward", last},
              {"reward_curve", curve},
              {"measured", {{"generation_s", m.generation}, {"feedback_s", m.feedback}, {"teacher_s", m.teacher},
                            {"train_s", m.train}, {"sync_s", m.sync}, {"wait_s", m.wait}, {"step_s", m.step}}},
              {"simulated_step_s", predicted.step_time.value()}};
    out << j.dump(2) << "\n";
    return Status::Ok();
  }
  out << "kimi-plan sdpo run #" << run_id << ": " << c.train.model.name << ", " << runtime::PlacementName(c.placement)
      << ", loss " << runtime::LossModeName(c.loss) << ", " << n << " steps\n";
  out << "reward    first tenth " << FormatFixed(first, 3) << " -> last tenth " << FormatFixed(last, 3)
      << "   curve (means of tenths):";
  for (double v : curve) out << " " << FormatFixed(v, 2);
  out << "\n\nstep breakdown, median over steps 2.." << n << " (s), measured beside `simulate loop` priced with them\n";
  Table t({"system", "measured", "simulated share"});
  const double step = predicted.step_time.value();
  auto share = [&](LoopSystem s) { return FormatFixed(100 * predicted.share[static_cast<int>(s)], 1) + " %"; };
  t.AddRow({"rollout", FormatFixed(m.generation, 4), share(LoopSystem::kRollout)});
  t.AddRow({"feedback", FormatFixed(m.feedback, 4), share(LoopSystem::kFeedback)});
  t.AddRow({"teacher", FormatFixed(m.teacher, 4), share(LoopSystem::kTeacher)});
  t.AddRow({"train", FormatFixed(m.train, 4), share(LoopSystem::kTrain)});
  t.AddRow({"sync", FormatFixed(m.sync, 4), share(LoopSystem::kSync)});
  t.AddRow({"trainer waiting", FormatFixed(m.wait, 4), "-"});
  t.AddRow({"step", FormatFixed(m.step, 4), FormatFixed(step, 4) + " s simulated (ratio " +
                                                FormatFixed(step > 0 ? m.step / step : 0, 2) + ")"});
  out << t.Render();
  return Status::Ok();
}

// Rank 0, or the colocated process: opens the store, runs, summarises.
Status RunLoggedLoop(const po::variables_map& vm, const SdpoConfig& c, const runtime::Rendezvous* rv, CliEnv& env) {
  KP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(vm["db"].as<std::string>(), env.clock));
  RunRecord run;
  run.kind = "sdpo";
  run.model = c.train.model.name;
  run.config_json = runtime::SdpoConfigJson(c);
  NameRecordingProcess(env, &run);
  KP_ASSIGN_OR_RETURN(run.id, store->CreateRun(run));
  StoreObserver observer(c, *store, run.id, vm["log-every"].as<int>(), env);
  const Status looped = rv == nullptr ? runtime::RunColocatedLoop(c, env.fs, observer)
                                      : runtime::RunSplitLoopRank(c, *rv, C10dFromFlags(vm, c.train.device, env), env.fs, observer);
  KP_RETURN_IF_ERROR(EndRunWith(*store, run.id, looped));
  return PrintSummary(c, observer, run.id, vm.count("json") > 0, env.out);
}

}  // namespace

Status SdpoCommand(const std::vector<std::string>& args, CliEnv& env) {
  const po::options_description desc = SdpoOptions();
  po::variables_map vm;
  KP_ASSIGN_OR_RETURN(const bool proceed, ParseCommand(args, desc, &vm, env.out));
  if (!proceed) return Status::Ok();
  KP_ASSIGN_OR_RETURN(const SdpoConfig config, BuildSdpoConfig(vm, env));
  if (vm.count("print-config")) {
    env.out << nlohmann::ordered_json::parse(runtime::SdpoConfigJson(config)).dump(2) << "\n";
    return Status::Ok();
  }
  KP_RETURN_IF_ERROR(CheckTrainMemory(config.train, env));
  KP_RETURN_IF_ERROR(runtime::CheckTaskContexts(config, env.fs));
  PrepareDevice(config.train, env);
  if (config.placement == runtime::Placement::kColocated) return RunLoggedLoop(vm, config, nullptr, env);
  const char* rank = env.getenv("RANK");
  if (rank == nullptr || *rank == '\0') {
    KP_RETURN_IF_ERROR(CheckLocalRankCapacity(runtime::SplitRanksOf(config).world, "--rollout-ranks", env));
    KP_RETURN_IF_ERROR(runtime::CheckDeviceAndBackend(C10dFromFlags(vm, config.train.device, env)));
    return LaunchLocalRanks("sdpo", args, runtime::SplitRanksOf(config).world, vm["db"].as<std::string>(), env);
  }
  KP_ASSIGN_OR_RETURN(const runtime::Rendezvous rv, runtime::RendezvousFromEnvironment(env.getenv));
  if (rv.rank == 0) return RunLoggedLoop(vm, config, &rv, env);
  // The other ranks report nothing: rank 0 logs every step.
  class Silent : public runtime::LoopObserver {
    Status OnStart(std::int64_t, std::int64_t, const std::string&) override { return Status::Ok(); }
    Status OnWarmStart(int, int, double) override { return Status::Ok(); }
    Status OnInitialSync(const LoopStepMetrics&) override { return Status::Ok(); }
    Status OnStep(const LoopStepMetrics&) override { return Status::Ok(); }
  } silent;
  return runtime::RunSplitLoopRank(config, rv, C10dFromFlags(vm, config.train.device, env), env.fs, silent);
}

}  // namespace kp
