#include "simulator/cluster_graph.h"

#include <boost/graph/dijkstra_shortest_paths.hpp>
#include <boost/graph/filtered_graph.hpp>
#include <algorithm>
#include <limits>

namespace kp {

const char* NetworkName(Network n) {
  switch (n) {
    case Network::kRdma: return "rdma";
    case Network::kTcp: return "tcp";
  }
  return "?";
}

const char* VertexKindName(VertexKind k) {
  switch (k) {
    case VertexKind::kGpu: return "gpu";
    case VertexKind::kNvSwitch: return "nvswitch";
    case VertexKind::kNic: return "nic";
    case VertexKind::kRdmaFabric: return "rdma-fabric";
    case VertexKind::kFrontendPort: return "frontend-port";
    case VertexKind::kFrontendNetwork: return "frontend-network";
    case VertexKind::kHostMemory: return "host-memory";
  }
  return "?";
}

const char* LinkKindName(LinkKind k) {
  switch (k) {
    case LinkKind::kNvlink: return "nvlink";
    case LinkKind::kGpuNic: return "gpu-nic";
    case LinkKind::kRdma: return "rdma";
    case LinkKind::kHostDevice: return "host-device";
    case LinkKind::kHostPort: return "host-port";
    case LinkKind::kTcp: return "tcp";
  }
  return "?";
}

namespace {

// Offsets inside one node's block of vertices (see node_base_).
int NicOffset(const GpuSpec& g) { return g.gpus_per_node; }
int SwitchOffset(const GpuSpec& g) { return g.gpus_per_node + g.nics_per_node; }
int PortOffset(const GpuSpec& g) { return SwitchOffset(g) + 1; }
int HostOffset(const GpuSpec& g) { return SwitchOffset(g) + 2; }

// NVLink is allowed on both networks: NCCL keeps intra-node traffic on it.
bool NetworkAllows(Network net, LinkKind k) {
  if (k == LinkKind::kNvlink) return true;
  if (net == Network::kRdma) return k == LinkKind::kGpuNic || k == LinkKind::kRdma;
  return k == LinkKind::kHostDevice || k == LinkKind::kHostPort || k == LinkKind::kTcp;
}

// filtered_graph copies its predicate, which must be default-constructible.
struct EdgeOnNetwork {
  const ClusterGraph* cluster = nullptr;
  Network net = Network::kRdma;
  template <typename Edge>
  bool operator()(const Edge& e) const {
    const LinkId id = boost::get(boost::edge_index, cluster->graph(), e);
    return NetworkAllows(net, cluster->links()[id].kind);
  }
};

}  // namespace

bool ClusterGraph::Contains(GpuId g) const {
  return g.node >= 0 && g.node < nodes_ && g.gpu >= 0 && g.gpu < gpu_.gpus_per_node;
}

VertexId ClusterGraph::Gpu(GpuId g) const { return node_base_[g.node] + g.gpu; }
VertexId ClusterGraph::Nic(int node, int nic) const { return node_base_[node] + NicOffset(gpu_) + nic; }
VertexId ClusterGraph::NvSwitch(int node) const { return node_base_[node] + SwitchOffset(gpu_); }
VertexId ClusterGraph::FrontendPort(int node) const { return node_base_[node] + PortOffset(gpu_); }
VertexId ClusterGraph::HostMemory(int node) const { return node_base_[node] + HostOffset(gpu_); }

std::vector<LinkCapacity> ClusterGraph::Capacities() const {
  std::vector<LinkCapacity> c;
  c.reserve(links_.size());
  for (const ClusterLink& l : links_) c.push_back(l.capacity);
  return c;
}

VertexId ClusterGraph::AddVertex(VertexKind kind, int node, int index) {
  vertices_.push_back(ClusterVertex{kind, node, index});
  return static_cast<VertexId>(boost::add_vertex(*graph_));
}

void ClusterGraph::AddLink(VertexId a, VertexId b, LinkKind kind, LinkCapacity c) {
  for (auto [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
    const LinkId id = static_cast<LinkId>(links_.size());
    links_.push_back(ClusterLink{from, to, kind, c});
    boost::add_edge(from, to, id, *graph_);
  }
}

Result<ClusterGraph> BuildCluster(const GpuSpec& gpu, int nodes, const ClusterOptions& options) {
  if (nodes <= 0) return Status::InvalidArgument("nodes: must be a positive integer, got " + std::to_string(nodes));
  KP_RETURN_IF_ERROR(gpu.Validate());
  if (options.host_link.value() <= 0) return Status::InvalidArgument("host_link: must be > 0");
  for (Nanoseconds l : {options.nvlink_latency, options.pcie_latency, options.rdma_latency, options.tcp_latency}) {
    if (l.value() < 0) return Status::InvalidArgument("latency: must be >= 0 ns");
  }
  ClusterGraph c;
  c.gpu_ = gpu;
  c.nodes_ = nodes;
  // Vertex ids follow insertion order, so each node's block is contiguous
  // and the accessors above are arithmetic.
  for (int n = 0; n < nodes; ++n) {
    c.node_base_.push_back(static_cast<VertexId>(c.vertices_.size()));
    for (int i = 0; i < gpu.gpus_per_node; ++i) c.AddVertex(VertexKind::kGpu, n, i);
    for (int k = 0; k < gpu.nics_per_node; ++k) c.AddVertex(VertexKind::kNic, n, k);
    c.AddVertex(VertexKind::kNvSwitch, n, 0);
    c.AddVertex(VertexKind::kFrontendPort, n, 0);
    c.AddVertex(VertexKind::kHostMemory, n, 0);
  }
  c.rdma_fabric_ = c.AddVertex(VertexKind::kRdmaFabric, -1, 0);
  c.frontend_network_ = c.AddVertex(VertexKind::kFrontendNetwork, -1, 0);

  const LinkCapacity nvlink{gpu.nvlink, options.nvlink_latency};
  // The GPU's PCIe link to its NIC is sized to the NIC: it is the NIC, not
  // PCIe, that the datasheets rate and that bounds RDMA.
  const LinkCapacity gpu_nic{gpu.nic, options.pcie_latency};
  const LinkCapacity rdma{gpu.nic, options.rdma_latency};
  const LinkCapacity host{options.host_link, options.pcie_latency};
  const LinkCapacity tcp{gpu.frontend, options.tcp_latency};
  for (int n = 0; n < nodes; ++n) {
    for (int i = 0; i < gpu.gpus_per_node; ++i) {
      const GpuId g{n, i};
      c.AddLink(c.Gpu(g), c.NvSwitch(n), LinkKind::kNvlink, nvlink);
      c.AddLink(c.Gpu(g), c.Nic(n, i % gpu.nics_per_node), LinkKind::kGpuNic, gpu_nic);
      c.AddLink(c.Gpu(g), c.HostMemory(n), LinkKind::kHostDevice, host);
      // AddLink adds GPU -> host first, so host -> GPU is the last link.
      c.host_to_device_.push_back(static_cast<LinkId>(c.links_.size()) - 1);
    }
    for (int k = 0; k < gpu.nics_per_node; ++k) c.AddLink(c.Nic(n, k), c.rdma_fabric_, LinkKind::kRdma, rdma);
    c.AddLink(c.HostMemory(n), c.FrontendPort(n), LinkKind::kHostPort, host);
    c.AddLink(c.FrontendPort(n), c.frontend_network_, LinkKind::kTcp, tcp);
  }
  return c;
}

LinkId ClusterGraph::HostToDevice(GpuId g) const {
  if (!Contains(g)) return -1;
  return host_to_device_[static_cast<size_t>(g.node) * gpu_.gpus_per_node + g.gpu];
}

std::vector<LinkId> ClusterGraph::Path(GpuId from, GpuId to, Network net) const {
  if (!Contains(from) || !Contains(to) || from == to) return {};
  const boost::filtered_graph<ClusterBoostGraph, EdgeOnNetwork> view(*graph_, EdgeOnNetwork{this, net});
  // Latency in ns plus a thousandth per hop: the lowest latency wins and,
  // among equal latencies, the fewest hops.
  std::vector<double> weight(links_.size());
  for (size_t id = 0; id < links_.size(); ++id) {
    weight[id] = static_cast<double>(links_[id].capacity.latency.value()) + 1e-3;
  }
  const size_t n = vertices_.size();
  std::vector<VertexId> pred(n);
  std::vector<double> dist(n, std::numeric_limits<double>::infinity());
  const auto index = boost::get(boost::vertex_index, *graph_);
  boost::dijkstra_shortest_paths(
      view, static_cast<size_t>(Gpu(from)),
      boost::predecessor_map(boost::make_iterator_property_map(pred.begin(), index))
          .distance_map(boost::make_iterator_property_map(dist.begin(), index))
          .weight_map(boost::make_iterator_property_map(weight.begin(), boost::get(boost::edge_index, *graph_))));
  const VertexId target = Gpu(to);
  if (dist[target] == std::numeric_limits<double>::infinity()) return {};
  std::vector<LinkId> path;
  for (VertexId v = target; v != Gpu(from); v = pred[v]) {
    // One edge per direction joins two vertices, so the pair names it.
    const auto [e, found] = boost::edge(pred[v], v, *graph_);
    path.push_back(boost::get(boost::edge_index, *graph_, e));
  }
  std::reverse(path.begin(), path.end());
  return path;
}

Nanoseconds ClusterGraph::PathLatency(const std::vector<LinkId>& path) const {
  Nanoseconds total{0};
  for (LinkId id : path) total += links_[id].capacity.latency;
  return total;
}

BytesPerSecond ClusterGraph::PathBandwidth(const std::vector<LinkId>& path) const {
  if (path.empty()) return BytesPerSecond(std::numeric_limits<double>::infinity());
  BytesPerSecond lo = links_[path.front()].capacity.bandwidth;
  for (LinkId id : path) lo = std::min(lo, links_[id].capacity.bandwidth);
  return lo;
}

}  // namespace kp
