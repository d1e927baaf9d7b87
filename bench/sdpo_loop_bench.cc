// kimi-plan-sdpo-bench: the SDPO loop of runtime/sdpo_loop.h without the
// CLI and the store, so that the runtime-only tree runs it on a GPU machine.
// The configuration is docs/benchmarks.md's CPU one (kimi-k3-debug scaled to
// 5 layers, hidden 128, 2 heads, 4 experts, the byte tokenizer's 260 ids;
// one-digit addition, 8 prompts x 8 samples, at most 4 new tokens, the
// compact reprompt, a 150-step warm start with 90% of its examples in the
// teacher's format); the flags below change the rest. The split placement's
// ranks are started torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT), each on cuda:LOCAL_RANK.
//
//   kimi-plan-sdpo-bench [--placement colocated|split] [--loss sdpo|grpo|k1-opd]
//       [--steps 100] [--lr 1e-3] [--lora-rank 0] [--pp 1] [--microbatches 1]
//       [--rollout-ranks 1] [--sft-steps 150] [--device cuda] [--backend auto]
//       [--timeout-s 300] [--json]
//
// Rank 0 prints a line every 10 steps, then the reward curve (means of
// tenths), the medians over steps 2..N of each system's time and the
// `kimi-plan simulate loop` command that prices them; with --json one JSON
// object. Exit codes: 0, 2 on bad arguments, 1 when the loop fails.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "common/file_system.h"
#include "common/stats.h"
#include "runtime/rendezvous.h"
#include "runtime/runtime_config.h"
#include "runtime/sdpo_loop.h"
#include "specs/presets.h"

namespace {

using kp::Result;
using kp::Status;
using kp::runtime::LoopStepMetrics;
using kp::runtime::SdpoConfig;

struct Args {
  std::string placement = "colocated", loss = "sdpo", device = "cuda", backend = "auto";
  int steps = 100, lora_rank = 0, pp = 1, microbatches = 1, rollout_ranks = 1, sft_steps = 150, timeout_s = 300;
  double lr = 1e-3;
  bool json = false;
};

Result<Args> ParseArgs(int argc, char** argv) {
  Args a;
  KP_ASSIGN_OR_RETURN(const auto kv, kp::bench::OptionPairs(argc, argv, "json", &a.json));
  const std::map<std::string, int*> ints = {{"steps", &a.steps}, {"lora-rank", &a.lora_rank},
                                            {"pp", &a.pp},       {"microbatches", &a.microbatches},
                                            {"rollout-ranks", &a.rollout_ranks}, {"sft-steps", &a.sft_steps},
                                            {"timeout-s", &a.timeout_s}};
  const std::map<std::string, std::string*> strings = {
      {"placement", &a.placement}, {"loss", &a.loss}, {"device", &a.device}, {"backend", &a.backend}};
  for (const auto& [k, v] : kv) {
    try {
      if (ints.count(k)) *ints.at(k) = std::stoi(v);
      else if (strings.count(k)) *strings.at(k) = v;
      else if (k == "lr") a.lr = std::stod(v);
      else return Status::InvalidArgument("unknown option --" + k);
    } catch (const std::exception&) {
      return Status::InvalidArgument("--" + k + ": not a number: " + v);
    }
  }
  return a;
}

Result<SdpoConfig> Configure(const Args& a, int local_rank) {
  SdpoConfig c;
  kp::RealFileSystem fs;
  KP_ASSIGN_OR_RETURN(const kp::ModelSpec preset, kp::PresetCatalog(fs, kp::DefaultPresetDir()).Model("kimi-k3-debug"));
  kp::runtime::ScaleFlags scale;
  scale.layers = 5;
  scale.hidden = 128;
  scale.heads = 2;
  scale.experts = 4;
  scale.vocab = 260;
  KP_ASSIGN_OR_RETURN(c.train.model, kp::runtime::ScaleModel(preset, scale));
  c.train.steps = a.steps;
  c.train.lr = a.lr;
  c.train.warmup = 0;
  c.train.min_lr_ratio = 1.0;
  c.train.bias_update_rate = 0;
  c.train.deterministic = false;  // as the other benchmarks: the device's fastest kernels
  c.train.lora.rank = a.lora_rank;
  c.train.lora.alpha = 2.0 * a.lora_rank;
  c.train.device = a.device == "cuda" ? "cuda:" + std::to_string(local_rank) : a.device;
  c.task = "addition";
  c.task_options.min_digits = c.task_options.max_digits = 1;
  c.prompts = 8;
  c.sampling.samples = 8;
  c.sampling.max_new_tokens = 4;
  KP_ASSIGN_OR_RETURN(c.loss, kp::runtime::ParseLossMode(a.loss));
  KP_ASSIGN_OR_RETURN(c.reprompt.text, kp::runtime::ParseRepromptTemplate("compact"));
  c.sft_steps = a.sft_steps;
  c.sft_context_share = 0.9;
  KP_ASSIGN_OR_RETURN(c.placement, kp::runtime::ParsePlacement(a.placement));
  c.rollout_ranks = a.rollout_ranks;
  c.actor.pp = a.pp;
  c.actor.microbatches = a.microbatches;
  KP_RETURN_IF_ERROR(kp::runtime::ValidateSdpoConfig(c));
  return c;
}

// Rank 0's observer: a line every 10 steps, every step kept for the summary.
class Recorder : public kp::runtime::LoopObserver {
 public:
  explicit Recorder(bool quiet) : quiet_(quiet) {}
  Status OnStart(std::int64_t parameters, std::int64_t, const std::string& task) override {
    if (!quiet_) std::printf("%lld parameters, task %s\n", static_cast<long long>(parameters), task.c_str());
    return Status::Ok();
  }
  Status OnWarmStart(int step, int steps, double loss) override {
    if (!quiet_ && (step % 50 == 0 || step == steps)) std::printf("warm start %4d/%d  loss %.4f\n", step, steps, loss);
    return Status::Ok();
  }
  Status OnInitialSync(const LoopStepMetrics&) override { return Status::Ok(); }
  Status OnStep(const LoopStepMetrics& m) override {
    steps_.push_back(m);
    if (!quiet_ && m.train.step % 10 == 0)
      std::printf("step %4d  reward %.3f  loss %.4f  step %.4f s  gen %.4f s  teacher %.4f s  train %.4f s  sync %.5f s\n",
                  m.train.step, m.reward_mean, m.train.loss, m.train.step_seconds, m.generation_s, m.teacher_s,
                  m.train_s, m.sync_s);
    return Status::Ok();
  }
  const std::vector<LoopStepMetrics>& steps() const { return steps_; }

 private:
  bool quiet_;
  std::vector<LoopStepMetrics> steps_;
};

// The median over steps 2..N of one field (every step when there is one).
template <typename F>
double MedianOf(const std::vector<LoopStepMetrics>& steps, F field, bool syncs_only = false) {
  std::vector<double> v;
  for (std::size_t i = steps.size() > 1 ? 1 : 0; i < steps.size(); ++i)
    if (!syncs_only || steps[i].sync_version >= 0) v.push_back(field(steps[i]));
  return v.empty() ? 0.0 : kp::bench::Median(v);
}

void Report(const Args& a, const SdpoConfig& c, const std::vector<LoopStepMetrics>& steps) {
  std::vector<double> rewards, curve;
  for (const auto& m : steps) rewards.push_back(m.reward_mean);
  const std::size_t n = rewards.size(), parts = std::min<std::size_t>(10, n);
  for (std::size_t p = 0; p < parts; ++p) curve.push_back(kp::MeanOf(rewards, p * n / parts, (p + 1) * n / parts));
  const double gen = MedianOf(steps, [](const auto& m) { return m.generation_s; });
  const double feedback = MedianOf(steps, [](const auto& m) { return m.feedback_s; });
  const double teacher = MedianOf(steps, [](const auto& m) { return m.teacher_s; });
  const double train = MedianOf(steps, [](const auto& m) { return m.train_s; });
  const double sync = MedianOf(steps, [](const auto& m) { return m.sync_s; }, true);
  const double step = MedianOf(steps, [](const auto& m) { return m.train.step_seconds; });
  const bool split = c.placement == kp::runtime::Placement::kSplit;
  std::ostringstream sim;
  sim << "kimi-plan simulate loop --rollout-s " << gen << " --feedback-s " << feedback << " --teacher-s " << teacher
      << " --train-s " << train << " --sync-s " << sync << " --actor-gpus " << c.actor.pp
      << (split ? " --placement split --off-policy --rollout-gpus " + std::to_string(c.rollout_ranks) : "")
      << " --steps " << std::max(3, c.train.steps);
  if (a.json) {
    const nlohmann::json j = {{"placement", a.placement}, {"loss", a.loss},         {"steps", n},
                              {"reward_curve", curve},    {"generation_s", gen},   {"feedback_s", feedback},
                              {"teacher_s", teacher},     {"train_s", train},      {"sync_s", sync},
                              {"step_s", step},           {"simulate_command", sim.str()}};
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::printf("reward curve (means of tenths):");
  for (double r : curve) std::printf(" %.2f", r);
  std::printf("\nmedians over steps 2..%zu: rollout %.4f s  feedback %.5f s  teacher %.4f s  train %.4f s  "
              "sync %.5f s  step %.4f s\n%s\n",
              n, gen, feedback, teacher, train, sync, step, sim.str().c_str());
}

Status Run(const Args& a) {
  kp::runtime::Rendezvous rv;  // colocated: one process, rank 0
  if (a.placement != "colocated") {
    KP_ASSIGN_OR_RETURN(rv, kp::runtime::RendezvousFromEnvironment([](const char* n) { return std::getenv(n); }));
  }
  KP_ASSIGN_OR_RETURN(const SdpoConfig c, Configure(a, rv.local_rank));
  kp::RealFileSystem fs;
  Recorder recorder(a.json || rv.rank != 0);
  if (c.placement == kp::runtime::Placement::kColocated) {
    KP_RETURN_IF_ERROR(kp::runtime::RunColocatedLoop(c, fs, recorder));
  } else {
    kp::runtime::C10dOptions c10d;
    c10d.backend = a.backend;
    c10d.device = c.train.device;
    c10d.timeout_s = a.timeout_s;
    KP_RETURN_IF_ERROR(kp::runtime::RunSplitLoopRank(c, rv, c10d, fs, recorder));
  }
  if (rv.rank == 0) Report(a, c, recorder.steps());
  return Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string prefix = "kimi-plan-sdpo-bench: ";
  return kp::bench::BenchMain<Args>(ParseArgs(argc, argv), prefix, [&](const Args& a) {
    const Status s = Run(a);
    if (s.ok()) return 0;
    std::cerr << prefix << s.message() << "\n";
    return s.code() == Status::Code::kInvalidArgument ? 2 : 1;
  });
}
