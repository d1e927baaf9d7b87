#include "simulator/cluster_graph.h"

#include <gtest/gtest.h>

#include "planner/test_util.h"

namespace kp {
namespace {

std::vector<LinkKind> Kinds(const ClusterGraph& c, const std::vector<LinkId>& path) {
  std::vector<LinkKind> k;
  for (LinkId id : path) k.push_back(c.links()[id].kind);
  return k;
}

// The vertices a path visits, from its first link's tail on.
std::vector<VertexId> Visits(const ClusterGraph& c, const std::vector<LinkId>& path) {
  std::vector<VertexId> v{c.links()[path.front()].from};
  for (LinkId id : path) {
    EXPECT_EQ(c.links()[id].from, v.back()) << "path is not contiguous";
    v.push_back(c.links()[id].to);
  }
  return v;
}

ClusterGraph H200(int nodes) {
  auto c = BuildCluster(testing::Gpu("h200"), nodes);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return *c;
}

TEST(ClusterGraphTest, HasEveryVertexAndBothDirectionsOfEveryLink) {
  const ClusterGraph c = H200(2);
  // Per node 8 GPUs, 8 NICs, NVSwitch, front-end port, host memory; then
  // the RDMA fabric and the front-end network.
  EXPECT_EQ(c.vertices().size(), 2u * (8 + 8 + 3) + 2);
  // Per node: each GPU to the switch, its NIC and host (3 x 8), each NIC to
  // the fabric (8), host to port, port to network: 34 links, 68 directions.
  EXPECT_EQ(c.links().size(), 2u * 68);
  EXPECT_EQ(boost::num_edges(c.graph()), c.links().size());
  EXPECT_EQ(boost::num_vertices(c.graph()), c.vertices().size());
  EXPECT_EQ(c.gpu_count(), 16);
  EXPECT_EQ(c.vertices()[c.Nic(1, 5)].kind, VertexKind::kNic);
  EXPECT_EQ(c.vertices()[c.Nic(1, 5)].node, 1);
  EXPECT_EQ(c.vertices()[c.Nic(1, 5)].index, 5);
  EXPECT_EQ(c.vertices()[c.HostMemory(1)].kind, VertexKind::kHostMemory);
  EXPECT_EQ(c.vertices()[c.RdmaFabric()].kind, VertexKind::kRdmaFabric);
}

TEST(ClusterGraphTest, RdmaPathUsesTheGpusRailNicAndTheFabric) {
  const ClusterGraph c = H200(2);
  const auto path = c.Path({0, 3}, {1, 3}, Network::kRdma);
  ASSERT_EQ(path.size(), 4u);
  EXPECT_EQ(Visits(c, path), (std::vector<VertexId>{c.Gpu({0, 3}), c.Nic(0, 3), c.RdmaFabric(), c.Nic(1, 3),
                                                    c.Gpu({1, 3})}));
  EXPECT_EQ(Kinds(c, path),
            (std::vector<LinkKind>{LinkKind::kGpuNic, LinkKind::kRdma, LinkKind::kRdma, LinkKind::kGpuNic}));
  // H200 preset: 400 Gb/s NICs = 50 GB/s; default latencies 1 us PCIe, 1 us per fabric hop.
  EXPECT_EQ(c.PathBandwidth(path).value(), 50e9);
  EXPECT_EQ(c.PathLatency(path).value(), 4'000);
}

TEST(ClusterGraphTest, GpuIUsesNicIModuloTheNicCount) {
  GpuSpec g = testing::Gpu("h200");
  g.nics_per_node = 4;
  auto c = BuildCluster(g, 2);
  ASSERT_TRUE(c.ok()) << c.status().message();
  const auto path = c->Path({0, 5}, {1, 6}, Network::kRdma);
  EXPECT_EQ(Visits(*c, path), (std::vector<VertexId>{c->Gpu({0, 5}), c->Nic(0, 1), c->RdmaFabric(), c->Nic(1, 2),
                                                     c->Gpu({1, 6})}));
}

TEST(ClusterGraphTest, TcpPathGoesThroughHostMemoryAndTheFrontEnd) {
  const ClusterGraph c = H200(3);
  const auto path = c.Path({2, 7}, {0, 1}, Network::kTcp);
  EXPECT_EQ(Visits(c, path),
            (std::vector<VertexId>{c.Gpu({2, 7}), c.HostMemory(2), c.FrontendPort(2), c.FrontendNetwork(),
                                   c.FrontendPort(0), c.HostMemory(0), c.Gpu({0, 1})}));
  EXPECT_EQ(Kinds(c, path), (std::vector<LinkKind>{LinkKind::kHostDevice, LinkKind::kHostPort, LinkKind::kTcp,
                                                   LinkKind::kTcp, LinkKind::kHostPort, LinkKind::kHostDevice}));
  // 50 Gb/s front end = 6.25 GB/s; 4 PCIe hops of 1 us and 2 TCP hops of 25 us.
  EXPECT_EQ(c.PathBandwidth(path).value(), 6.25e9);
  EXPECT_EQ(c.PathLatency(path).value(), 54'000);
}

TEST(ClusterGraphTest, InsideANodeBothNetworksUseNvlink) {
  const ClusterGraph c = H200(2);
  for (Network net : {Network::kRdma, Network::kTcp}) {
    const auto path = c.Path({1, 0}, {1, 7}, net);
    EXPECT_EQ(Visits(c, path), (std::vector<VertexId>{c.Gpu({1, 0}), c.NvSwitch(1), c.Gpu({1, 7})}));
    EXPECT_EQ(c.PathBandwidth(path).value(), 450e9);
  }
}

TEST(ClusterGraphTest, EachDirectionIsItsOwnLink) {
  const ClusterGraph c = H200(2);
  const auto there = c.Path({0, 0}, {1, 0}, Network::kRdma);
  const auto back = c.Path({1, 0}, {0, 0}, Network::kRdma);
  ASSERT_EQ(there.size(), back.size());
  for (size_t i = 0; i < there.size(); ++i) {
    const ClusterLink& a = c.links()[there[i]];
    const ClusterLink& b = c.links()[back[back.size() - 1 - i]];
    EXPECT_NE(there[i], back[back.size() - 1 - i]);
    EXPECT_EQ(a.from, b.to);
    EXPECT_EQ(a.to, b.from);
  }
}

TEST(ClusterGraphTest, HostToDeviceIsTheHostToGpuLink) {
  const ClusterGraph c = H200(2);
  const ClusterLink& l = c.links()[c.HostToDevice({1, 4})];
  EXPECT_EQ(l.from, c.HostMemory(1));
  EXPECT_EQ(l.to, c.Gpu({1, 4}));
  EXPECT_EQ(l.capacity.bandwidth.value(), 55e9);  // ClusterOptions' PCIe Gen5 x16 default
  EXPECT_EQ(c.HostToDevice({2, 0}), -1);
}

TEST(ClusterGraphTest, NoPathToItselfOrOutsideTheCluster) {
  const ClusterGraph c = H200(2);
  EXPECT_TRUE(c.Path({0, 2}, {0, 2}, Network::kRdma).empty());
  EXPECT_TRUE(c.Path({0, 2}, {2, 0}, Network::kRdma).empty());
  EXPECT_TRUE(c.Path({0, 8}, {1, 0}, Network::kTcp).empty());
}

TEST(ClusterGraphTest, OptionsSetLatenciesAndHostLinks) {
  ClusterOptions o;
  o.pcie_latency = Nanoseconds(0);
  o.rdma_latency = Nanoseconds(700);
  o.host_link = GBps(64);
  auto c = BuildCluster(testing::Gpu("h200"), 2, o);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->PathLatency(c->Path({0, 0}, {1, 0}, Network::kRdma)).value(), 1'400);
  EXPECT_EQ(c->links()[c->HostToDevice({0, 0})].capacity.bandwidth.value(), 64e9);
}

TEST(ClusterGraphTest, RejectsBadInput) {
  auto none = BuildCluster(testing::Gpu("h200"), 0);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(), "nodes: must be a positive integer, got 0");
  GpuSpec g = testing::Gpu("h200");
  g.nics_per_node = 0;
  auto bad = BuildCluster(g, 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "nics_per_node: must be a positive integer");
  EXPECT_EQ(bad.status().code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace kp
