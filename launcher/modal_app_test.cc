#include "launcher/modal_app.h"

#include <gtest/gtest.h>

#include "common/process_launcher.h"
#include "launcher/test_util.h"

namespace kp {
namespace {

using testing::RepoVerlKeys;
using testing::SeedLaunch;

std::string App(const Launch& l) {
  auto s = ModalApp(l, RepoVerlKeys(), "/opt/kimi-plan/bin/kimi-plan");
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : "";
}

bool Has(const std::string& text, const std::string& piece) { return text.find(piece) != std::string::npos; }

TEST(ModalApp, TheSeedsH200FullClusterOfSixteenH200Hosts) {
  const std::string s = App(SeedLaunch("h200-full", LaunchTarget::kModal, LaunchEngine::kNative));
  EXPECT_TRUE(Has(s, "app = modal.App(\"kimi-plan-h200-full\")\n"));
  EXPECT_TRUE(Has(s, "@app.function(image=image, gpu=\"H200:8\", timeout=TIMEOUT_S, volumes={\"/cache\": cache})\n"
                     "@modal.experimental.clustered(size=16, rdma=True)\n"
                     "def train(extra):\n")) << s;
  EXPECT_TRUE(Has(s, "TIMEOUT_S = 86400\n"));
  EXPECT_TRUE(Has(s, "NODES = 16\nGPUS_PER_NODE = 8\n"));
  EXPECT_TRUE(Has(s, "cache = modal.Volume.from_name(\"kimi-plan-cache\", create_if_missing=True)\n"));
  EXPECT_TRUE(Has(s, "info = modal.experimental.get_cluster_info()\n"));
  EXPECT_TRUE(Has(s, "return info.rank, ips\n"));
  EXPECT_TRUE(Has(s, "@app.local_entrypoint()\ndef main(extra: str = \"\"):\n"));
}

TEST(ModalApp, NativeRanksGetTheTorchrunEnvironmentFromTheClusterInfo) {
  const std::string s = App(SeedLaunch("h200-full", LaunchTarget::kModal, LaunchEngine::kNative));
  EXPECT_TRUE(Has(s, "\"RANK\": str(rank * GPUS_PER_NODE + local_rank),\n"));
  EXPECT_TRUE(Has(s, "\"WORLD_SIZE\": str(NODES * GPUS_PER_NODE),\n"));
  EXPECT_TRUE(Has(s, "\"LOCAL_RANK\": str(local_rank),\n"));
  EXPECT_TRUE(Has(s, "\"MASTER_ADDR\": ips[0],\n"));
  EXPECT_TRUE(Has(s, "\"MASTER_PORT\": str(MASTER_PORT),\n"));
  EXPECT_TRUE(Has(s, "\"OMP_NUM_THREADS\": os.environ.get(\"OMP_NUM_THREADS\") or "
                     "str(max(1, (os.cpu_count() or 1) // GPUS_PER_NODE)),\n"));
  EXPECT_TRUE(Has(s, "RUN_ARGS = [\n    \"run\",\n    \"--model\", \"kimi-k2.6\",\n    \"--mode\", \"full\",\n"));
  EXPECT_TRUE(Has(s, "    \"--tp\", \"8\",\n    \"--pp\", \"2\",\n"));
  EXPECT_TRUE(Has(s, "KIMI_PLAN_BIN = os.environ.get(\"KIMI_PLAN_BIN\", \"/opt/kimi-plan/bin/kimi-plan\")\n"));
  // `kimi-plan run` needs kimi-plan-runtime beside it in the image.
  EXPECT_TRUE(Has(s, "image.add_local_file(local_bin, \"/usr/local/bin/kimi-plan\")\n"));
  EXPECT_TRUE(Has(s, "\"kimi-plan-runtime\"), \"/usr/local/bin/kimi-plan-runtime\")\n"));
  EXPECT_TRUE(Has(s, "    \"NCCL_SOCKET_IFNAME\": \"^lo,docker0\",\n"));
  EXPECT_TRUE(Has(s, "    \"TORCH_NCCL_ASYNC_ERROR_HANDLING\": \"1\",\n"));
  EXPECT_FALSE(Has(s, "ray start"));
}

TEST(ModalApp, VerlWaitsForEveryNodeThenRunsTheTrainerOnRankZero) {
  const std::string s = App(SeedLaunch("h200-full", LaunchTarget::kModal, LaunchEngine::kVerl));
  EXPECT_TRUE(Has(s, "@modal.experimental.clustered(size=17, rdma=True)\n"));
  EXPECT_TRUE(Has(s, "NODES = 17\n"));
  EXPECT_TRUE(Has(s, "VERL_COMMIT = \"1dda039b9c6311889a9c9a26040677e1254814f9\"\n"));
  EXPECT_TRUE(Has(s, "IMAGE = os.environ.get(\"KIMI_PLAN_IMAGE\", \"verlai/verl:vllm024.latest\")\n"));
  EXPECT_TRUE(Has(s, "    \"actor_rollout_ref.actor.megatron.expert_model_parallel_size=8\",\n"));
  EXPECT_TRUE(Has(s, "    \"trainer.nnodes=16\",\n"));
  EXPECT_TRUE(Has(s, "    \"+ray_kwargs.ray_init.address=auto\",\n"));
  const size_t wait = s.find("    wait_for_ray_nodes(NODES, JOIN_TIMEOUT_S)\n");
  const size_t trainer = s.find("\"-m\", \"verl.trainer.main_ppo\", *VERL_ARGS, *extra]");
  ASSERT_NE(wait, std::string::npos);
  ASSERT_NE(trainer, std::string::npos);
  EXPECT_LT(wait, trainer);
  EXPECT_TRUE(Has(s, "alive = sum(1 for n in ray.nodes() if n[\"Alive\"])\n"));
}

TEST(ModalApp, B200FullAsksForB200Hosts) {
  const std::string s = App(SeedLaunch("b200-full", LaunchTarget::kModal, LaunchEngine::kNative));
  EXPECT_TRUE(Has(s, "gpu=\"B200:8\""));
  EXPECT_TRUE(Has(s, "@modal.experimental.clustered(size=8, rdma=True)\n"));
}

TEST(ModalApp, EverySeedAppCompilesWithoutModalInstalled) {
  RealFileSystem fs;
  RealProcessLauncher processes;
  for (const char* preset : {"h200-full", "b200-full", "h200-lora"}) {
    for (LaunchEngine e : {LaunchEngine::kNative, LaunchEngine::kVerl}) {
      const std::string path = ::testing::TempDir() + "/kp_" + preset + "_" + LaunchEngineName(e) + "_modal.py";
      ASSERT_TRUE(fs.WriteFile(path, App(SeedLaunch(preset, LaunchTarget::kModal, e))).ok());
      auto rc = processes.Run({"python3", "-m", "py_compile", path});
      ASSERT_TRUE(rc.ok()) << rc.status().message();
      EXPECT_EQ(*rc, 0) << path;
    }
  }
}

}  // namespace
}  // namespace kp
