// kimi-plan-sdpo-bench: the SDPO loop of runtime/sdpo/sdpo_loop.h without
// the CLI and the store, so that the runtime-only tree runs it on a GPU
// machine. The loop's whole configuration is a JSON file as `kimi-plan sdpo
// --print-config` prints it (and the runs table records it): the ones
// docs/benchmarks.md runs are bench/sdpo-*.json, each made by the command in
// its header line of docs/benchmarks.md. Only where the loop runs is set
// here. The split placement's ranks are started torchrun-style (RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), each on
// cuda:LOCAL_RANK.
//
//   kimi-plan-sdpo-bench --config bench/sdpo-colocated.json [--device cuda]
//       [--backend auto] [--timeout-s 300] [--json]
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
#include "common/limits.h"
#include "common/stats.h"
#include "runtime/comm/rendezvous.h"
#include "runtime/sdpo/sdpo_loop.h"
#include "specs/presets.h"

namespace {

using kp::Result;
using kp::Status;
using kp::runtime::LoopStepMetrics;
using kp::runtime::SdpoConfig;

struct Args {
  std::string config, device = "cuda", backend = "auto";
  int timeout_s = 300;
  bool json = false;
};

Result<Args> ParseArgs(int argc, char** argv) {
  Args a;
  KP_ASSIGN_OR_RETURN(const auto kv, kp::bench::OptionPairs(argc, argv, "json", &a.json));
  for (const auto& [k, v] : kv) {
    if (k == "config") a.config = v;
    else if (k == "device") a.device = v;
    else if (k == "backend") a.backend = v;
    else if (k == "timeout-s") {
      KP_ASSIGN_OR_RETURN(a.timeout_s, kp::bench::IntOption(k, v, 1));
    } else {
      return Status::InvalidArgument("unknown option --" + k + " (the loop's settings are in --config)");
    }
  }
  if (a.config.empty()) return Status::InvalidArgument("--config: required (a file of `kimi-plan sdpo --print-config`)");
  return a;
}

// The recorded configuration, run on this rank's device.
Result<SdpoConfig> Configure(const Args& a, int local_rank) {
  kp::RealFileSystem fs;
  KP_ASSIGN_OR_RETURN(const std::string text, fs.ReadFile(a.config, kp::limits::kMaxSpecFileBytes));
  KP_ASSIGN_OR_RETURN(SdpoConfig c, kp::runtime::SdpoConfigFromJson(
                                        text, kp::PresetCatalog(fs, kp::DefaultPresetDir())));
  c.train.device = a.device == "cuda" ? "cuda:" + std::to_string(local_rank) : a.device;
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
    const nlohmann::json j = {{"placement", kp::runtime::PlacementName(c.placement)},
                              {"loss", kp::runtime::LossModeName(c.loss)},
                              {"steps", n},
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
  const char* rank = std::getenv("RANK");
  if (rank != nullptr && *rank != '\0') {
    KP_ASSIGN_OR_RETURN(rv, kp::runtime::RendezvousFromEnvironment([](const char* n) { return std::getenv(n); }));
  }
  KP_ASSIGN_OR_RETURN(const SdpoConfig c, Configure(a, rv.local_rank));
  if (c.placement == kp::runtime::Placement::kSplit && rank == nullptr)
    return Status::InvalidArgument("--config: the split placement's ranks are started torchrun-style (RANK is unset)");
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
  return kp::bench::BenchMain<Args>(ParseArgs(argc, argv), prefix, [&](const Args& a) { return kp::bench::RunExitCode(Run(a), prefix); });
}
