#include "launcher/launch_spec.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "launcher/launcher.h"
#include "launcher/test_util.h"

namespace kp {
namespace {

using testing::NativeStates;
using testing::MakeLaunch;
using testing::SeedLaunch;
using testing::SeedTopology;

TEST(LaunchSpec, ParsesTargetsAndEngines) {
  EXPECT_EQ(*ParseLaunchTarget("slurm"), LaunchTarget::kSlurm);
  EXPECT_EQ(*ParseLaunchTarget("modal"), LaunchTarget::kModal);
  EXPECT_EQ(*ParseLaunchTarget("local"), LaunchTarget::kLocal);
  EXPECT_EQ(ParseLaunchTarget("k8s").status().message(), "--target: must be slurm, modal or local, got \"k8s\"");
  EXPECT_EQ(*ParseLaunchEngine("verl"), LaunchEngine::kVerl);
  EXPECT_EQ(ParseLaunchEngine("deepspeed").status().message(), "--engine: must be native or verl, got \"deepspeed\"");
}

TEST(LaunchSpec, ReadsWallTimesAsSbatchDoes) {
  EXPECT_EQ(*ParseWallTime("90"), 90 * 60);
  EXPECT_EQ(*ParseWallTime("10:30"), 10 * 60 + 30);
  EXPECT_EQ(*ParseWallTime("24:00:00"), 86400);
  EXPECT_EQ(*ParseWallTime("1-12"), 36 * 3600);
  EXPECT_EQ(*ParseWallTime("2-00:30:05"), 2 * 86400 + 30 * 60 + 5);
  for (const char* bad : {"", "1h", "-5", "1:2:3:4", "0", "1-", "12:"}) {
    auto r = ParseWallTime(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message().rfind("--time: ", 0), 0u) << r.status().message();
  }
  EXPECT_EQ(SlurmWallTime(86400), "1-00:00:00");
  EXPECT_EQ(SlurmWallTime(3 * 3600 + 4 * 60 + 5), "0-03:04:05");
}

TEST(LaunchSpec, RefusesAnInfeasiblePlanWithItsFirstViolationUnlessForced) {
  Launch l = SeedLaunch("h200-full", LaunchTarget::kSlurm, LaunchEngine::kNative);
  ASSERT_FALSE(l.evaluation.feasible());
  EXPECT_TRUE(CheckLaunch(l).ok());
  l.options.force = false;
  const Status s = CheckLaunch(l);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "--preset h200-full: the planner marks the plan infeasible (" + l.evaluation.violations[0] +
                             "); --force launches it anyway");
  EXPECT_EQ(l.evaluation.violations[0].rfind("actor: needs", 0), 0u);
}

TEST(LaunchSpec, RefusesAJobLargerThanTheTargetAllows) {
  Launch modal = SeedLaunch("h200-full", LaunchTarget::kModal, LaunchEngine::kVerl);
  EXPECT_EQ(modal.job_nodes(), 17);
  EXPECT_EQ(modal.max_nodes(), 32);
  EXPECT_TRUE(CheckLaunch(modal).ok());
  modal.options.max_nodes = 16;
  EXPECT_EQ(CheckLaunch(modal).message(),
            "--max-nodes: the job needs 17 nodes (136 GPUs, 1 of them for the teacher) but the modal target allows "
            "16; raise --max-nodes where the cluster has more");
  Launch local = SeedLaunch("h200-lora", LaunchTarget::kLocal, LaunchEngine::kNative);
  EXPECT_EQ(CheckLaunch(local).message(),
            "--max-nodes: the job needs 2 nodes (16 GPUs) but the local target allows 1 (this machine)");
  Launch big = MakeLaunch(NativeStates(SeedTopology("h200-full")), "big", LaunchTarget::kSlurm, LaunchEngine::kNative);
  big.request.nodes = 65;
  big.options.force = true;
  EXPECT_EQ(CheckLaunch(big).message().rfind("--max-nodes: the job needs 65 nodes (520 GPUs) but the slurm target allows 64", 0),
            0u);
}

TEST(LaunchSpec, RefusesWhatTheEngineCannotRun) {
  Launch l = SeedLaunch("h200-lora", LaunchTarget::kSlurm, LaunchEngine::kVerl);
  ASSERT_TRUE(CheckLaunch(l).ok());
  Launch local = l;
  local.options.target = LaunchTarget::kLocal;
  EXPECT_EQ(CheckLaunch(local).message(), "--engine: the local target runs the native runtime only, not verl");
  Launch zb = l;
  zb.request.schedule = ScheduleKind::kZbH1;
  EXPECT_EQ(CheckLaunch(zb).message(),
            "--engine: Megatron under verl runs 1f1b and interleaved-1f1b, not the plan's zb-h1 schedule; use --engine native");
  Launch split = l;
  split.request.placement = Placement::kSplit;
  EXPECT_EQ(CheckLaunch(split).message().rfind("--engine: verl runs the colocated hybrid engine", 0), 0u);
  Launch wide = l;
  wide.evaluation.plan.rollout_dp = 2;  // a 16-GPU teacher replica on one 8-GPU node
  EXPECT_EQ(CheckLaunch(wide).message(),
            "--teacher-nodes: a teacher replica takes rollout tp x dp = 16 GPUs, which does not divide the 8 GPUs of "
            "1 teacher node(s)");
  wide.options.teacher_nodes = 2;
  EXPECT_TRUE(CheckLaunch(wide).ok());
  // The native engine has no teacher pool, so none of this applies.
  Launch native = zb;
  native.request = NativeStates(native.request);
  native.options.engine = LaunchEngine::kNative;
  EXPECT_TRUE(CheckLaunch(native).ok());
  EXPECT_EQ(native.job_nodes(), 2);
}

// A 128-layer GPT on pp 64 (8 nodes, tp 1, dp 1) with the given split.
Launch DeepGpt(LayerSplitKind split, LaunchEngine engine) {
  PlanRequest r = testing::SeedRequest("kimi-k2.6", "h200", 8);
  r.model = testing::Gpt(128, 1024, 16, 32000);
  r.plan = ParallelPlan{1, 64, 1, 1, 1, 1, 1, 1, 1, 1};
  r.layer_split.kind = split;
  Launch l = MakeLaunch(NativeStates(r), "gpt", LaunchTarget::kSlurm, engine);
  l.options.force = true;
  l.options.teacher_nodes = 0;
  return l;
}

// Each engine runs exactly the split the planner sized: Megatron builds any
// split (the even one, rank 1 three layers and rank 2 two, through a
// layout), and so does the native runtime, told it by --layer-split.
TEST(LaunchSpec, EveryEngineBuildsThePlannedSplit) {
  for (LaunchEngine engine : {LaunchEngine::kVerl, LaunchEngine::kNative})
    for (LayerSplitKind split : {LayerSplitKind::kEven, LayerSplitKind::kMegatron}) {
      const Launch l = DeepGpt(split, engine);
      EXPECT_TRUE(CheckLaunch(l).ok()) << CheckLaunch(l).message();
    }
  const std::vector<std::string> args = NativeRunArgs(DeepGpt(LayerSplitKind::kMegatron, LaunchEngine::kNative), 0);
  ASSERT_GE(args.size(), 2u);
  EXPECT_EQ(std::vector<std::string>(args.end() - 2, args.end()),
            (std::vector<std::string>{"--layer-split", "megatron"}));
}

// The native runtime runs the plan as planned or is not launched: the
// seed's own states (Megatron's mixed precision) run and are passed on; what
// it does not execute (the split placement) is refused by name.
TEST(LaunchSpec, NativeRefusesWhatTheRuntimeDoesNotExecute) {
  Launch l = MakeLaunch(SeedTopology("h200-full"), "h200-full", LaunchTarget::kSlurm, LaunchEngine::kNative);
  l.options.force = true;
  EXPECT_TRUE(CheckLaunch(l).ok()) << CheckLaunch(l).message();
  const std::vector<std::string> args = NativeRunArgs(l, 8);
  const auto at = std::find(args.begin(), args.end(), "--state-precision");
  ASSERT_NE(at, args.end());
  EXPECT_EQ(*(at + 1), "mixed");
  l.request.placement = Placement::kSplit;
  EXPECT_EQ(CheckLaunch(l).message().rfind("--placement: kimi-plan run does not execute ", 0), 0u)
      << CheckLaunch(l).message();
  l.request.placement = Placement::kColocated;
  l.options.engine = LaunchEngine::kVerl;
  l.options.teacher_nodes = 0;
  EXPECT_TRUE(CheckLaunch(l).ok()) << CheckLaunch(l).message();
}

TEST(LaunchSpec, RefusesWhatModalCannotProvide) {
  Launch l = SeedLaunch("b200-full", LaunchTarget::kModal, LaunchEngine::kNative);
  ASSERT_TRUE(CheckLaunch(l).ok());
  Launch b300 = l;
  b300.request.gpu.name = "b300";
  EXPECT_EQ(CheckLaunch(b300).message(), "--gpu: Modal offers a100-80g, h100, h200 and b200, not \"b300\"");
  Launch half = l;
  half.request.gpus_per_node = 4;
  EXPECT_EQ(CheckLaunch(half).message(), "--gpus-per-node: Modal clusters take whole 8-GPU hosts, the plan has 4 GPUs per node");
  Launch long_run = l;
  long_run.options.wall_time_s = 2 * 86400;
  EXPECT_EQ(CheckLaunch(long_run).message(), "--time: Modal functions run at most 1-00:00:00, got 2-00:00:00");
  EXPECT_EQ(*ModalGpuName("h200"), "H200");
  EXPECT_EQ(*ModalGpuName("a100-80g"), "A100-80GB");
}

TEST(LaunchSpec, RefusesSlurmNamesThatWouldBreakTheHeader) {
  Launch l = SeedLaunch("h200-full", LaunchTarget::kSlurm, LaunchEngine::kNative);
  l.options.partition = "gpu h200";
  EXPECT_EQ(CheckLaunch(l).message(), "--partition: letters, digits and _.,:@+- only, got \"gpu h200\"");
  l.options.partition = "gpu,h200";
  l.options.account = "acct\n#SBATCH --nodes=1";
  EXPECT_EQ(CheckLaunch(l).message().rfind("--account: letters, digits", 0), 0u);
}

TEST(LaunchSpec, NativeRunArgsCarryThePlan) {
  Launch l = SeedLaunch("h200-full", LaunchTarget::kSlurm, LaunchEngine::kNative);
  // Selective recomputation of the attention core under flash attention
  // is priced as none, and runs as none: no --recompute.
  const std::vector<std::string> expected = {
      "run", "--model", "kimi-k2.6", "--mode", "full", "--prompt-length", "2048", "--response-length", "2048",
      "--global-batch", "128", "--micro-batch", "1", "--rollout-n", "1", "--schedule", "1f1b", "--dtype", "bf16", "--state-precision", "fp32",
      "--distributed-optimizer", "off",
      "--tp", "8", "--pp", "2", "--vp", "1", "--ep", "8", "--etp", "1", "--cp", "1", "--dp", "8",
      "--sequence-parallel", "on", "--layer-split", "even"};
  EXPECT_EQ(NativeRunArgs(l, 0), expected);
  Launch lora = SeedLaunch("h200-lora", LaunchTarget::kSlurm, LaunchEngine::kNative);
  const std::vector<std::string> args = NativeRunArgs(lora, 16);
  ASSERT_GE(args.size(), 3u);
  EXPECT_EQ(std::vector<std::string>(args.begin(), args.begin() + 3), (std::vector<std::string>{"run", "--nproc", "16"}));
  const std::string joined = [&] {
    std::string s;
    for (const std::string& a : args) s += a + " ";
    return s;
  }();
  EXPECT_NE(joined.find("--mode lora --lora-rank 32 --lora-alpha 64 "), std::string::npos) << joined;
}

// Plain full recomputation is the flags' default (uniform 1); a method or
// count beyond it is carried, and so are the selective modules run executes.
TEST(LaunchSpec, NativeRunArgsCarryTheRecomputeMethod) {
  Launch l = SeedLaunch("h200-full", LaunchTarget::kSlurm, LaunchEngine::kNative);
  l.request.recompute = Recompute::kFull;
  auto after = [](const std::vector<std::string>& args, const std::string& flag) {
    auto it = std::find(args.begin(), args.end(), flag);
    return it == args.end() || it + 1 == args.end() ? std::string("(absent)") : *(it + 1);
  };
  std::vector<std::string> args = NativeRunArgs(l, 0);
  EXPECT_EQ(after(args, "--recompute"), "full");
  EXPECT_EQ(after(args, "--recompute-method"), "(absent)");
  l.request.recompute_method = RecomputeMethod::kBlock;
  l.request.recompute_layers = 3;
  args = NativeRunArgs(l, 0);
  EXPECT_EQ(after(args, "--recompute-method"), "block");
  EXPECT_EQ(after(args, "--recompute-num-layers"), "3");
  l.request.recompute_method = RecomputeMethod::kUniform;
  args = NativeRunArgs(l, 0);
  EXPECT_EQ(after(args, "--recompute-method"), "uniform");
  EXPECT_EQ(after(args, "--recompute-num-layers"), "3");
  l.request.recompute = Recompute::kSelective;
  l.request.recipe.recompute_modules = {RecomputeModule::kCoreAttn, RecomputeModule::kSharedExperts,
                                        RecomputeModule::kMlp};
  args = NativeRunArgs(l, 0);
  EXPECT_EQ(after(args, "--recompute"), "selective");
  EXPECT_EQ(after(args, "--recompute-modules"), "mlp,shared_experts");
  EXPECT_EQ(after(args, "--recompute-method"), "(absent)");
}

TEST(LaunchSpec, NcclDefaultsAreTheSeeds) {
  const std::vector<std::pair<std::string, std::string>> expected = {{"CUDA_DEVICE_MAX_CONNECTIONS", "1"},
                                                                     {"NCCL_DEBUG", "WARN"},
                                                                     {"NCCL_IB_DISABLE", "0"},
                                                                     {"NCCL_SOCKET_IFNAME", "^lo,docker0"},
                                                                     {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}};
  EXPECT_EQ(NcclDefaults(), expected);
}

TEST(LaunchSpec, LocalLaunchIsTheRuntimesCommandLineForEveryRank) {
  PlanRequest r = NativeStates(testing::SeedRequest("kimi-k3-debug", "h100", 1));
  r.plan = ParallelPlan{1, 2, 1, 1, 1, 1, 4, 1, 1, 1};
  Launch l = MakeLaunch(r, "custom", LaunchTarget::kLocal, LaunchEngine::kNative);
  auto a = BuildLaunch(l, VerlKeys(), "unused", "./build/kimi-plan");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_TRUE(a->files.empty());
  std::vector<std::string> expected = {"./build/kimi-plan"};
  for (const std::string& arg : NativeRunArgs(l, 8)) expected.push_back(arg);
  EXPECT_EQ(a->start_command, expected);
  EXPECT_EQ(a->start_command[3], "8");
}

TEST(LaunchSpec, BuildsOneFileAndItsStartCommandPerTarget) {
  auto slurm = BuildLaunch(SeedLaunch("h200-full", LaunchTarget::kSlurm, LaunchEngine::kNative), VerlKeys(),
                           "launch/h200-full", "kimi-plan");
  ASSERT_TRUE(slurm.ok()) << slurm.status().message();
  ASSERT_EQ(slurm->files.size(), 1u);
  EXPECT_EQ(slurm->files[0].path, "launch/h200-full/kimi-plan.sbatch");
  EXPECT_EQ(slurm->start_command, (std::vector<std::string>{"sbatch", "launch/h200-full/kimi-plan.sbatch"}));
  auto modal = BuildLaunch(SeedLaunch("h200-full", LaunchTarget::kModal, LaunchEngine::kNative), VerlKeys(),
                           "out", "kimi-plan");
  ASSERT_TRUE(modal.ok()) << modal.status().message();
  EXPECT_EQ(modal->start_command, (std::vector<std::string>{"modal", "run", "--detach", "out/kimi_plan_modal.py"}));
  Launch refused = SeedLaunch("h200-full", LaunchTarget::kModal, LaunchEngine::kNative);
  refused.options.force = false;
  EXPECT_FALSE(BuildLaunch(refused, VerlKeys(), "out", "kimi-plan").ok());
  EXPECT_EQ(JobLabel("my plan/2"), "my-plan-2");
  EXPECT_EQ(JobLabel(""), "custom");
}

}  // namespace
}  // namespace kp
