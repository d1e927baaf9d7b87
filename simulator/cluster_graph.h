// The cluster as a Boost.Graph graph. Vertices are the things bytes pass
// through: each GPU, each node's NVLink domain (its NVSwitch), each node's
// RDMA NICs, the scale-out RDMA fabric, each node's front-end TCP port, the
// front-end network, and each node's host memory (the end of host-to-device
// copies and of TCP's staging). Every physical link is two directed edges,
// one per direction, each with its own LinkId, bandwidth and latency, so a
// transfer one way does not slow one the other way.
//
//   GPU(n,i) <-> NVSwitch(n)                      NVLink, GpuSpec::nvlink
//   GPU(n,i) <-> NIC(n, i % nics)                 PCIe to the rail's NIC, GpuSpec::nic
//   NIC(n,k) <-> RDMA fabric                      RDMA, GpuSpec::nic
//   GPU(n,i) <-> HostMemory(n)                    PCIe, ClusterOptions::host_link
//   HostMemory(n) <-> FrontendPort(n)             PCIe, ClusterOptions::host_link
//   FrontendPort(n) <-> front-end network         TCP, GpuSpec::frontend (the whole node's)
//
// Thread-safety: immutable after BuildCluster; const methods may be called
// from several threads.
#ifndef KIMI_PLAN_SIMULATOR_CLUSTER_GRAPH_H_
#define KIMI_PLAN_SIMULATOR_CLUSTER_GRAPH_H_

#include <boost/graph/adjacency_list.hpp>
#include <memory>
#include <vector>

#include "common/status.h"
#include "common/units.h"
#include "simulator/link.h"
#include "specs/gpu_spec.h"

namespace kp {

/// Which network carries traffic between nodes. Inside a node GPUs always
/// talk over NVLink, whichever is chosen.
enum class Network { kRdma, kTcp };
const char* NetworkName(Network n);

enum class VertexKind { kGpu, kNvSwitch, kNic, kRdmaFabric, kFrontendPort, kFrontendNetwork, kHostMemory };
const char* VertexKindName(VertexKind k);

enum class LinkKind {
  kNvlink,      ///< GPU <-> the node's NVSwitch
  kGpuNic,      ///< GPU <-> its rail's NIC (PCIe)
  kRdma,        ///< NIC <-> the RDMA fabric
  kHostDevice,  ///< GPU <-> host memory (PCIe; host-to-device copies)
  kHostPort,    ///< host memory <-> the front-end port (PCIe)
  kTcp,         ///< front-end port <-> the front-end network
};
const char* LinkKindName(LinkKind k);

/// One GPU: its node and its index inside the node.
struct GpuId {
  int node = 0;
  int gpu = 0;
  bool operator==(const GpuId&) const = default;
};

using VertexId = int;

struct ClusterVertex {
  VertexKind kind = VertexKind::kGpu;
  int node = -1;   ///< -1 for the two cluster-wide networks
  int index = 0;   ///< GPU or NIC index inside the node; 0 otherwise
};

/// One direction of one link.
struct ClusterLink {
  VertexId from = 0, to = 0;
  LinkKind kind = LinkKind::kNvlink;
  LinkCapacity capacity;
};

/// What a GpuSpec does not say. Latencies are order-of-magnitude defaults
/// (they matter for small messages only); set them from measurements.
struct ClusterOptions {
  /// Host memory to a GPU and to the front-end port, per direction: PCIe
  /// Gen5 x16 achieves about 55 GB/s of its 64.
  BytesPerSecond host_link = GBps(55);
  Nanoseconds nvlink_latency{500};   ///< GPU <-> NVSwitch, one hop
  Nanoseconds pcie_latency{1'000};   ///< every PCIe hop
  Nanoseconds rdma_latency{1'000};   ///< NIC <-> fabric, one hop (switch and cable)
  Nanoseconds tcp_latency{25'000};   ///< port <-> front-end network, one hop (kernel stack)
};

/// The directed multigraph Boost sees: vertex and edge properties are
/// indices into ClusterGraph's own tables.
using ClusterBoostGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS,
                                                boost::no_property,
                                                boost::property<boost::edge_index_t, LinkId>>;

class ClusterGraph {
 public:
  const GpuSpec& gpu_spec() const { return gpu_; }
  int nodes() const { return nodes_; }
  int gpus_per_node() const { return gpu_.gpus_per_node; }
  int nics_per_node() const { return gpu_.nics_per_node; }
  int gpu_count() const { return nodes_ * gpu_.gpus_per_node; }
  bool Contains(GpuId g) const;

  /// Vertex ids. Arguments must be in range (Contains / nodes()).
  VertexId Gpu(GpuId g) const;
  VertexId NvSwitch(int node) const;
  VertexId Nic(int node, int nic) const;
  VertexId FrontendPort(int node) const;
  VertexId HostMemory(int node) const;
  VertexId RdmaFabric() const { return rdma_fabric_; }
  VertexId FrontendNetwork() const { return frontend_network_; }

  const std::vector<ClusterVertex>& vertices() const { return vertices_; }
  const std::vector<ClusterLink>& links() const { return links_; }
  /// The links' capacities indexed by LinkId, as FlowNetwork takes them.
  std::vector<LinkCapacity> Capacities() const;
  const ClusterBoostGraph& graph() const { return *graph_; }

  /// The lowest-latency path from one GPU to another that `net` allows
  /// (Dijkstra over Boost.Graph; among equal latencies the fewest hops).
  /// Inside a node it is GPU -> NVSwitch -> GPU; across nodes over RDMA
  /// GPU -> its rail's NIC (i % nics) -> fabric -> the peer's rail NIC ->
  /// GPU; over TCP GPU -> host -> front-end port -> front-end network ->
  /// port -> host -> GPU. Empty when from == to or either is not Contains().
  std::vector<LinkId> Path(GpuId from, GpuId to, Network net) const;
  /// The single link host memory -> GPU (host-to-device copies); -1 when
  /// the GPU is not Contains().
  LinkId HostToDevice(GpuId g) const;

  /// Sum of the latencies of `path`'s links.
  Nanoseconds PathLatency(const std::vector<LinkId>& path) const;
  /// The smallest bandwidth on `path` (what one flow alone achieves).
  BytesPerSecond PathBandwidth(const std::vector<LinkId>& path) const;

 private:
  friend Result<ClusterGraph> BuildCluster(const GpuSpec&, int, const ClusterOptions&);
  VertexId AddVertex(VertexKind kind, int node, int index);
  /// Adds both directions of one physical link.
  void AddLink(VertexId a, VertexId b, LinkKind kind, LinkCapacity c);

  GpuSpec gpu_;
  int nodes_ = 0;
  // Per node, the first vertex of its block; a block is laid out as
  // GPUs, NICs, NVSwitch, front-end port, host memory.
  std::vector<VertexId> node_base_;
  VertexId rdma_fabric_ = 0, frontend_network_ = 0;
  std::vector<ClusterVertex> vertices_;
  std::vector<ClusterLink> links_;
  std::vector<LinkId> host_to_device_;  // indexed by global GPU index
  // Shared, not copied: it is immutable once built, and copying a Boost
  // adjacency_list trips GCC's -Wmaybe-uninitialized inside Boost.
  std::shared_ptr<ClusterBoostGraph> graph_ = std::make_shared<ClusterBoostGraph>();
};

/// Builds `nodes` nodes of `gpu` joined by one RDMA fabric and one
/// front-end network. Errors name the field: "nodes: must be a positive
/// integer", or the GpuSpec's own validation message.
Result<ClusterGraph> BuildCluster(const GpuSpec& gpu, int nodes, const ClusterOptions& options = {});

}  // namespace kp

#endif  // KIMI_PLAN_SIMULATOR_CLUSTER_GRAPH_H_
