#include "launcher/slurm_script.h"

#include <gtest/gtest.h>

#include <sstream>

#include "common/process_launcher.h"
#include "launcher/test_util.h"

namespace kp {
namespace {

using testing::RepoVerlKeys;
using testing::SeedLaunch;

std::string Script(const Launch& l) {
  auto s = SlurmScript(l, RepoVerlKeys());
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : "";
}

// The #SBATCH lines sbatch reads: those before the first command.
std::vector<std::string> SbatchHeader(const std::string& script) {
  std::vector<std::string> out;
  std::istringstream in(script);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] != '#') break;
    if (line.rfind("#SBATCH ", 0) == 0) out.push_back(line.substr(8));
  }
  return out;
}

bool Has(const std::string& text, const std::string& piece) { return text.find(piece) != std::string::npos; }

TEST(SlurmScript, HeaderOfTheSeedsH200FullPlan) {
  const std::string s = Script(SeedLaunch("h200-full", LaunchTarget::kSlurm, LaunchEngine::kNative));
  EXPECT_EQ(s.rfind("#!/bin/bash\n", 0), 0u);
  const std::vector<std::string> expected = {"--job-name=kimi-plan-h200-full", "--nodes=16", "--ntasks-per-node=8",
                                             "--gpus-per-node=8", "--time=1-00:00:00", "--exclusive"};
  EXPECT_EQ(SbatchHeader(s), expected);
  EXPECT_TRUE(Has(s, "# Verdict: the planner marks this plan infeasible (actor: needs")) << s;
}

TEST(SlurmScript, PartitionAccountTimeAndCpusReachTheHeader) {
  Launch l = SeedLaunch("h200-full", LaunchTarget::kSlurm, LaunchEngine::kNative);
  l.options.partition = "h200";
  l.options.account = "rl-team";
  l.options.wall_time_s = 2 * 3600 + 30 * 60;
  l.options.cpus_per_task = 12;
  const std::vector<std::string> h = SbatchHeader(Script(l));
  const std::vector<std::string> expected = {"--job-name=kimi-plan-h200-full", "--nodes=16", "--ntasks-per-node=8",
                                             "--gpus-per-node=8", "--time=0-02:30:00", "--exclusive",
                                             "--partition=h200", "--account=rl-team", "--cpus-per-task=12"};
  EXPECT_EQ(h, expected);
}

TEST(SlurmScript, FindsTheHeadNodeAndExportsTheNcclDefaults) {
  const std::string s = Script(SeedLaunch("h200-full", LaunchTarget::kSlurm, LaunchEngine::kNative));
  EXPECT_TRUE(Has(s, "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1)\nexport MASTER_ADDR\n"));
  EXPECT_TRUE(Has(s, "export MASTER_PORT=${MASTER_PORT:-29500}\n"));
  EXPECT_TRUE(Has(s, "export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}\n"));
  EXPECT_TRUE(Has(s, "export NCCL_DEBUG=${NCCL_DEBUG:-WARN}\n"));
  EXPECT_TRUE(Has(s, "export NCCL_IB_DISABLE=${NCCL_IB_DISABLE:-0}\n"));
  EXPECT_TRUE(Has(s, "export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-'^lo,docker0'}\n"));
  EXPECT_TRUE(Has(s, "export TORCH_NCCL_ASYNC_ERROR_HANDLING=${TORCH_NCCL_ASYNC_ERROR_HANDLING:-1}\n"));
}

TEST(SlurmScript, NativeRanksGetTheTorchrunEnvironmentFromSrun) {
  const std::string s = Script(SeedLaunch("h200-full", LaunchTarget::kSlurm, LaunchEngine::kNative));
  EXPECT_TRUE(Has(s, "srun --kill-on-bad-exit=1 --nodes=16 --ntasks-per-node=8 \\\n"));
  EXPECT_TRUE(Has(s, "export RANK=\"$SLURM_PROCID\" WORLD_SIZE=\"$SLURM_NTASKS\" LOCAL_RANK=\"$SLURM_LOCALID\" "
                     "LOCAL_WORLD_SIZE=\"$SLURM_NTASKS_PER_NODE\" "
                     "OMP_NUM_THREADS=\"${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}\"; exec \"$@\""));
  EXPECT_TRUE(Has(s, "kimi-plan-rank \"$KIMI_PLAN\" \"${RUN_ARGS[@]}\" \"$@\"\n"));
  EXPECT_TRUE(Has(s, "KIMI_PLAN=${KIMI_PLAN:-kimi-plan}\n"));
  EXPECT_TRUE(Has(s, "RUN_ARGS=(\n  run\n  --model kimi-k2.6\n  --mode full\n"));
  EXPECT_TRUE(Has(s, "  --tp 8\n  --pp 2\n  --vp 1\n  --ep 8\n  --etp 1\n  --cp 1\n  --dp 8\n"));
  EXPECT_FALSE(Has(s, "ray start"));
}

TEST(SlurmScript, VerlStartsRayAndWaitsForEveryNodeBeforeTheTrainer) {
  const std::string s = Script(SeedLaunch("h200-full", LaunchTarget::kSlurm, LaunchEngine::kVerl));
  const std::vector<std::string> expected = {"--job-name=kimi-plan-h200-full", "--nodes=17", "--ntasks-per-node=1",
                                             "--gpus-per-node=8", "--time=1-00:00:00", "--exclusive",
                                             "--cpus-per-task=64"};
  EXPECT_EQ(SbatchHeader(s), expected);
  const size_t head = s.find("ray start --head --node-ip-address=\"$HEAD_IP\" --port=\"$RAY_PORT\"");
  const size_t first_wait = s.find("wait_for_ray_nodes 1\n");
  const size_t workers = s.find("ray start --address=\"$RAY_ADDRESS\"");
  const size_t all_wait = s.find("wait_for_ray_nodes 17\n");
  const size_t trainer = s.find("python3 -m verl.trainer.main_ppo \"${VERL_ARGS[@]}\" \"$@\" || rc=$?\n");
  ASSERT_NE(trainer, std::string::npos) << s;
  EXPECT_LT(head, first_wait);
  EXPECT_LT(first_wait, workers);
  EXPECT_LT(workers, all_wait);
  EXPECT_LT(all_wait, trainer);
  EXPECT_TRUE(Has(s, "JOIN_TIMEOUT_S=600\n"));
  // The only sleep is the poll's interval.
  size_t sleeps = 0;
  for (size_t at = s.find("sleep "); at != std::string::npos; at = s.find("sleep ", at + 1)) ++sleeps;
  EXPECT_EQ(sleeps, 1u);
  EXPECT_TRUE(Has(s, "  actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2\n"));
  EXPECT_TRUE(Has(s, "  distillation.distillation_loss.loss_mode=k1\n"));
  EXPECT_TRUE(Has(s, "  +ray_kwargs.ray_init.address=auto\n"));
  // The file logger, in the job's folder, beside the job file that names the
  // plan and, after the trainer, its exit code (kimi-plan ingest).
  EXPECT_TRUE(Has(s, "  'trainer.logger=[\"console\",\"file\"]'\n"));
  EXPECT_TRUE(Has(s, "export VERL_FILE_LOGGER_PATH=${VERL_FILE_LOGGER_PATH:-\"$KIMI_PLAN_JOB_DIR/verl-metrics.jsonl\"}\n"));
  const size_t job_file = s.find("printf '%s\\n' \"$KIMI_PLAN_JOB\" > \"$KIMI_PLAN_JOB_FILE\"\n");
  const size_t exit_code = s.find("\"exit_code\\\":$rc}");
  EXPECT_LT(job_file, trainer);
  EXPECT_LT(trainer, exit_code);
  EXPECT_NE(exit_code, std::string::npos);
}

TEST(SlurmScript, EverySeedScriptPassesBashN) {
  RealFileSystem fs;
  RealProcessLauncher processes;
  for (const char* preset : {"h200-full", "b200-full", "h200-lora"}) {
    for (LaunchEngine e : {LaunchEngine::kNative, LaunchEngine::kVerl}) {
      const std::string path = ::testing::TempDir() + "/kp_" + preset + "_" + LaunchEngineName(e) + ".sbatch";
      ASSERT_TRUE(fs.WriteFile(path, Script(SeedLaunch(preset, LaunchTarget::kSlurm, e))).ok());
      auto rc = processes.Run({"bash", "-n", path});
      ASSERT_TRUE(rc.ok()) << rc.status().message();
      EXPECT_EQ(*rc, 0) << path;
    }
  }
}

}  // namespace
}  // namespace kp
