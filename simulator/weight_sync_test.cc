#include "simulator/weight_sync.h"

#include <gtest/gtest.h>

#include "planner/memory_model.h"
#include "planner/test_util.h"
#include "specs/param_count.h"

namespace kp {
namespace {

// Seed 000's table (Modal's RL infrastructure blog), Kimi K2.6 on H200.
struct SeedRow {
  SyncMode mode;
  double gb, tcp_s, rdma_s;
};
constexpr SeedRow kSeed[] = {
    {SyncMode::kFull, 595.2, 95.23, 1.49},
    {SyncMode::kLoraSharedOuter, 9.4, 1.50, 0.0235},
    {SyncMode::kLoraPerExpert, 41.0, 6.56, 0.1025},
};

double Seconds(Nanoseconds ns) { return ToSeconds(ns).value(); }

// One GPU and one NIC per node with a 1 GB/s NIC: one bucket of 1 GB takes
// exactly 1 s on a hop, plus the hop's path latency (2 PCIe + 2 fabric hops).
GpuSpec OneGpuNodes() {
  GpuSpec g = testing::Gpu("h200");
  g.gpus_per_node = 1;
  g.nics_per_node = 1;
  g.nic = GBps(1);
  return g;
}
constexpr std::int64_t kSecond = 1'000'000'000;
constexpr std::int64_t kHopLatency = 2 * 1'000 + 2 * 1'000;  // ClusterOptions defaults

ClusterGraph Cluster(const GpuSpec& g, int nodes) {
  auto c = BuildCluster(g, nodes);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return *c;
}

SyncResult Sync(const ClusterGraph& c, const SyncRequest& r) {
  auto s = SimulateSync(c, r);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return *s;
}

TEST(WeightSyncTest, FullUpdateIsInt4ExpertsWithGroupScalesAndBf16Rest) {
  const ModelSpec m = testing::Model("kimi-k2.6");
  // Independent count of the routed experts from the config: 60 MoE layers
  // x 384 experts x SwiGLU (3 x 7168 x 2048), each weight 4 bits plus a
  // 2-byte scale per 32.
  const double routed = 60.0 * 384 * 3 * 7168 * 2048;
  const double total = CountParams(m).total;
  EXPECT_DOUBLE_EQ(FullUpdateBytes(m).value(), routed * (0.5 + 2.0 / 32) + 2.0 * (total - routed));
  EXPECT_NEAR(FullUpdateBytes(m).value() / 1e9, 595.2, 595.2 * 0.01);
}

TEST(WeightSyncTest, LoraUpdatesAreBf16AdaptersOfTheSeedsSize) {
  const ModelSpec m = testing::Model("kimi-k2.6");
  LoraOptions o;
  o.rank = 32;
  o.experts = LoraExperts::kSharedOuter;
  EXPECT_DOUBLE_EQ(LoraUpdateBytes(m, o).value(), 2 * LoraParams(m, o));
  EXPECT_NEAR(LoraUpdateBytes(m, o).value() / 1e9, 9.4, 9.4 * 0.02);
  o.experts = LoraExperts::kPerExpert;
  EXPECT_NEAR(LoraUpdateBytes(m, o).value() / 1e9, 41.0, 41.0 * 0.02);
}

TEST(WeightSyncTest, ReproducesTheSeedTableWithinTwoPercent) {
  const ModelSpec m = testing::Model("kimi-k2.6");
  const GpuSpec g = testing::Gpu("h200");
  for (const SeedRow& row : kSeed) {
    SCOPED_TRACE(SyncModeName(row.mode));
    auto rep = WeightSyncReport(m, g, row.mode, 32, 1, kDefaultSyncBucket);
    ASSERT_TRUE(rep.ok()) << rep.status().message();
    EXPECT_NEAR(rep->bytes.value() / 1e9, row.gb, row.gb * 0.02);
    EXPECT_NEAR(Seconds(rep->tcp.total), row.tcp_s, row.tcp_s * 0.02);
    EXPECT_NEAR(Seconds(rep->rdma.total), row.rdma_s, row.rdma_s * 0.02);
  }
}

TEST(WeightSyncTest, PointToPointIsBytesOverTheNodesBandwidthPlusLatency) {
  const ClusterGraph c = Cluster(testing::Gpu("h200"), 2);
  // 400 GB over 8 rails of 50 GB/s: 50 GB per GPU in exactly 1 s, plus 4 us.
  const SyncResult rdma = Sync(c, {.bytes = GB(400), .receivers = 1, .bucket = GB(400), .net = Network::kRdma});
  EXPECT_EQ(rdma.total.value(), kSecond + 4'000);
  EXPECT_EQ(rdma.buckets, 1);
  // Over TCP the 8 GPUs' shares meet at the one 6.25 GB/s front-end port:
  // 400 GB / 6.25 GB/s = 64 s, plus 4 PCIe and 2 TCP hops (54 us).
  const SyncResult tcp = Sync(c, {.bytes = GB(400), .receivers = 1, .bucket = GB(400), .net = Network::kTcp});
  EXPECT_EQ(tcp.total.value(), 64 * kSecond + 54'000);
  EXPECT_DOUBLE_EQ(tcp.bandwidth.value(), 400e9 / (64 + 54e-6));
}

TEST(WeightSyncTest, OneReceiverOneBucketEqualsPointToPoint) {
  // The same closed form as above, for the seed's full Kimi update.
  const ModelSpec m = testing::Model("kimi-k2.6");
  const GpuSpec g = testing::Gpu("h200");
  const Bytes bytes = FullUpdateBytes(m);
  const ClusterGraph c = Cluster(g, 2);
  const SyncResult r = Sync(c, {.bytes = bytes, .receivers = 1, .bucket = bytes, .net = Network::kRdma});
  const std::int64_t closed = ToNanoseconds(TransferTime(bytes, g.node_rdma())).value() + 4'000;
  EXPECT_NEAR(static_cast<double>(r.total.value()), static_cast<double>(closed), 1.0);
}

// Progress: one call per bucket as it reaches the chain's last receiver, in
// order, ending at (buckets, buckets).
TEST(WeightSyncTest, ReportsProgressOncePerBucketAtTheLastReceiver) {
  const ClusterGraph c = Cluster(OneGpuNodes(), 4);
  std::vector<std::pair<int, int>> calls;
  SyncRequest r{.bytes = GB(4), .receivers = 3, .bucket = GB(1)};
  r.on_progress = [&](int done, int total) { calls.emplace_back(done, total); };
  const SyncResult s = Sync(c, r);
  EXPECT_EQ(calls, (std::vector<std::pair<int, int>>{{1, 4}, {2, 4}, {3, 4}, {4, 4}}));
  EXPECT_EQ(s.buckets, 4);
}

TEST(WeightSyncTest, PipelinedChainTakesBucketsPlusReceiversMinusOneBucketTimes) {
  // 4 buckets, 3 receivers, equal links: (4 + 3 - 1) x one bucket's hop.
  const ClusterGraph c = Cluster(OneGpuNodes(), 4);
  const SyncResult r = Sync(c, {.bytes = GB(4), .receivers = 3, .bucket = GB(1)});
  const std::int64_t hop = kSecond + kHopLatency;
  EXPECT_EQ(r.buckets, 4);
  EXPECT_EQ(r.total.value(), (4 + 3 - 1) * hop);
  // Bucket k reaches receiver n after k + n hop times; the trainer starts
  // bucket k after k.
  ASSERT_EQ(r.timeline.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(r.timeline[k].sent.value(), k * hop);
    for (int n = 1; n <= 3; ++n) {
      EXPECT_EQ(r.timeline[k].received[n - 1].value(), (k + n) * hop) << "bucket " << k << " receiver " << n;
      EXPECT_EQ(r.timeline[k].applied[n - 1], r.timeline[k].received[n - 1]);
    }
  }
  EXPECT_NEAR(r.bandwidth.value(), 4e9 / (6 * hop * 1e-9), 1e-3);
  EXPECT_NEAR(r.aggregate_bandwidth.value(), 3 * r.bandwidth.value(), 1e-3);
}

TEST(WeightSyncTest, CopiesOverlapTheNetworkUnlessTheyAreSlower) {
  const ClusterGraph c = Cluster(OneGpuNodes(), 4);
  const std::int64_t hop = kSecond + kHopLatency;
  // 1 GB at 2 GB/s: 0.5 s per copy, faster than a hop, so only the last
  // bucket's copy shows.
  const SyncResult fast = Sync(c, {.bytes = GB(4), .receivers = 3, .bucket = GB(1), .h2d = GBps(2)});
  EXPECT_EQ(fast.total.value(), 6 * hop + kSecond / 2);
  EXPECT_EQ(fast.timeline[2].applied[1].value(), fast.timeline[2].received[1].value() + kSecond / 2);
  // 1 GB at 0.5 GB/s: 2 s per copy; the last receiver's copies queue
  // behind each other from its first bucket (at 3 hops) on: 3 hops + 4 x 2 s.
  const SyncResult slow = Sync(c, {.bytes = GB(4), .receivers = 3, .bucket = GB(1), .h2d = GBps(0.5)});
  EXPECT_EQ(slow.total.value(), 3 * hop + 8 * kSecond);
  // Staging on the trainer too (checkpoint-engine's first stage) delays the
  // first send by one 0.5 s copy; later stagings hide under the sends.
  const SyncResult staged =
      Sync(c, {.bytes = GB(4), .receivers = 3, .bucket = GB(1), .h2d = GBps(2), .sender_h2d = true});
  EXPECT_EQ(staged.timeline[0].sent.value(), kSecond / 2);
  EXPECT_EQ(staged.total.value(), kSecond / 2 + 6 * hop + kSecond / 2);
}

TEST(WeightSyncTest, TreeChildrenShareTheirParentsUplink) {
  const ClusterGraph c = Cluster(OneGpuNodes(), 3);
  // Fanout 2: the trainer sends one 1 GB bucket to both receivers at once,
  // each at half its NIC: 2 s, one path latency. The chain needs two hops.
  const SyncResult tree = Sync(c, {.bytes = GB(1), .receivers = 2, .bucket = GB(1), .fanout = 2});
  EXPECT_EQ(tree.total.value(), 2 * kSecond + kHopLatency);
  const SyncResult chain = Sync(c, {.bytes = GB(1), .receivers = 2, .bucket = GB(1)});
  EXPECT_EQ(chain.total.value(), 2 * (kSecond + kHopLatency));
}

TEST(WeightSyncTest, LastBucketHoldsTheRest) {
  const ClusterGraph c = Cluster(OneGpuNodes(), 2);
  const SyncResult r = Sync(c, {.bytes = GB(2.5), .receivers = 1, .bucket = GB(1)});
  ASSERT_EQ(r.buckets, 3);
  EXPECT_EQ(r.timeline[2].bytes.value(), 0.5e9);
  EXPECT_EQ(r.total.value(), 2 * (kSecond + kHopLatency) + kSecond / 2 + kHopLatency);
}

TEST(WeightSyncTest, PipelinedBroadcastGrowsSubLinearlyInReceivers) {
  const ModelSpec m = testing::Model("kimi-k2.6");
  auto rep = WeightSyncReport(m, testing::Gpu("h200"), SyncMode::kFull, 32, 8, kDefaultSyncBucket);
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->scaling.size(), 4u);  // 1, 2, 4, 8 receivers
  const double t1 = Seconds(rep->scaling[0].broadcast);
  for (size_t i = 1; i < rep->scaling.size(); ++i) {
    const SyncScalingPoint& p = rep->scaling[i];
    const SyncScalingPoint& prev = rep->scaling[i - 1];
    // Time per receiver falls as receivers are added...
    EXPECT_LT(Seconds(p.broadcast) / p.receivers, Seconds(prev.broadcast) / prev.receivers);
    // ...and each added receiver costs about one bucket's hop, not a whole
    // transfer: far below sending to each in turn.
    EXPECT_EQ(p.sequential, rep->scaling[0].broadcast * p.receivers);
    EXPECT_LT(Seconds(p.broadcast), Seconds(p.sequential));
  }
  // 8 receivers of 35 buckets: (35 + 7) / 35 = 1.2 of one receiver's time.
  EXPECT_LT(Seconds(rep->scaling.back().broadcast), 1.25 * t1);
  EXPECT_EQ(rep->broadcast.request.receivers, 8);
  EXPECT_EQ(rep->broadcast.total, rep->scaling.back().broadcast);
}

TEST(WeightSyncTest, ModesParseAndPrint) {
  for (SyncMode m : {SyncMode::kFull, SyncMode::kLoraSharedOuter, SyncMode::kLoraPerExpert}) {
    auto parsed = ParseSyncMode(SyncModeName(m));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, m);
  }
  auto bad = ParseSyncMode("lora");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "--mode: 'lora' is not one of full, lora-shared-outer, lora-per-expert");
}

TEST(WeightSyncTest, RejectsBadInputNamingTheField) {
  const ModelSpec m = testing::Model("kimi-k2.6");
  const GpuSpec g = testing::Gpu("h200");
  auto rank = WeightSyncReport(m, g, SyncMode::kLoraPerExpert, 0, 1, kDefaultSyncBucket);
  ASSERT_FALSE(rank.ok());
  EXPECT_EQ(rank.status().message(), "--lora-rank: must be a positive integer");
  EXPECT_EQ(rank.status().code(), Status::Code::kInvalidArgument);
  auto receivers = WeightSyncReport(m, g, SyncMode::kFull, 32, 0, kDefaultSyncBucket);
  ASSERT_FALSE(receivers.ok());
  EXPECT_EQ(receivers.status().message(), "--receivers: must be a positive integer");
  auto bucket = WeightSyncReport(m, g, SyncMode::kFull, 32, 1, Bytes(0));
  ASSERT_FALSE(bucket.ok());
  EXPECT_EQ(bucket.status().message(), "--bucket-gib: must be > 0 bytes");

  const ClusterGraph c = Cluster(g, 2);
  auto too_many = SimulateSync(c, {.bytes = GB(1), .receivers = 2, .bucket = GB(1)});
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().message(), "--receivers: 2 receivers and the trainer need 3 nodes; the cluster has 2");
  auto tiny = SimulateSync(c, {.bytes = GB(595.2), .receivers = 1, .bucket = Bytes(1e6)});
  ASSERT_FALSE(tiny.ok());
  EXPECT_EQ(tiny.status().message().rfind("--bucket-gib: ", 0), 0u);
  auto fanout = SimulateSync(c, {.bytes = GB(1), .receivers = 1, .bucket = GB(1), .fanout = 0});
  ASSERT_FALSE(fanout.ok());
  EXPECT_EQ(fanout.status().message(), "--fanout: must be a positive integer");
  auto h2d = SimulateSync(c, {.bytes = GB(1), .receivers = 1, .bucket = GB(1), .h2d = GBps(-1)});
  ASSERT_FALSE(h2d.ok());
  EXPECT_EQ(h2d.status().message(), "--h2d: must be >= 0 bytes per second");
}

TEST(WeightSyncTest, JsonHasTheSeedComparisonKeys) {
  const ModelSpec m = testing::Model("kimi-k2.6");
  auto rep = WeightSyncReport(m, testing::Gpu("h200"), SyncMode::kLoraSharedOuter, 32, 2, kDefaultSyncBucket);
  ASSERT_TRUE(rep.ok());
  const nlohmann::json j = ToJson(*rep);
  EXPECT_EQ(j.at("schema"), "kimi-plan.sync/1");
  EXPECT_EQ(j.at("mode"), "lora-shared-outer");
  EXPECT_EQ(j.at("lora_rank"), 32);
  EXPECT_DOUBLE_EQ(j.at("bytes").get<double>(), rep->bytes.value());
  EXPECT_DOUBLE_EQ(j.at("tcp_s").get<double>(), Seconds(rep->tcp.total));
  EXPECT_DOUBLE_EQ(j.at("rdma_s").get<double>(), Seconds(rep->rdma.total));
  EXPECT_EQ(j.at("broadcast").at("receivers"), 2);
  EXPECT_EQ(j.at("broadcast").at("timeline").size(), static_cast<size_t>(rep->broadcast.buckets));
  EXPECT_EQ(j.at("scaling").size(), 2u);
  EXPECT_TRUE(ToJson(*WeightSyncReport(m, testing::Gpu("h200"), SyncMode::kFull, 32, 1, kDefaultSyncBucket))
                  .at("lora_rank")
                  .is_null());
  const std::string text = FormatSyncReport(*rep);
  EXPECT_NE(text.find("kimi-k2.6 on h200: lora-shared-outer rank 32"), std::string::npos) << text;
  EXPECT_NE(text.find("rdma"), std::string::npos);
}

}  // namespace
}  // namespace kp
