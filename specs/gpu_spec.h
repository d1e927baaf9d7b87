// A GPU type and the node it comes in. Bandwidths are per GPU and per
// direction unless named otherwise; see docs/presets.md for the sources.
#ifndef KIMI_PLAN_SPECS_GPU_SPEC_H_
#define KIMI_PLAN_SPECS_GPU_SPEC_H_

#include <string>

#include "common/status.h"
#include "common/units.h"

namespace kp {

struct GpuSpec {
  std::string name;
  /// "ampere", "hopper" or "blackwell": which precisions the tensor cores
  /// take (MX FP8 needs Blackwell); empty when a file does not say.
  std::string arch;
  Bytes memory;                    ///< HBM capacity as the driver reports it
  FlopsPerSecond bf16;             ///< dense, no sparsity
  FlopsPerSecond fp16;
  FlopsPerSecond fp8;              ///< 0 where the GPU has no FP8
  BytesPerSecond hbm;
  BytesPerSecond nvlink;           ///< per GPU, one direction
  int gpus_per_node = 8;
  /// GPUs one NVLink domain joins: the node (8 on HGX boards), or a whole
  /// rack of several nodes (72 on GB200 / GB300 NVL72, nodes of 4). A group
  /// within it communicates over NVLink. 0 in a file: the node.
  int nvlink_domain = 0;
  int nics_per_node = 8;
  BytesPerSecond nic;              ///< one NIC (RDMA scale-out), one direction
  BytesPerSecond frontend;         ///< the node's TCP front-end network
  std::string source;              ///< where the numbers come from

  /// GPUs sharing NVLink: nvlink_domain, or the node when none is given.
  int nvlink_gpus() const { return nvlink_domain > 0 ? nvlink_domain : gpus_per_node; }
  /// RDMA bandwidth of one whole node.
  BytesPerSecond node_rdma() const { return nic * nics_per_node; }
  /// RDMA bandwidth available to one GPU when every GPU of the node sends.
  BytesPerSecond gpu_rdma() const { return node_rdma() / gpus_per_node; }

  Status Validate() const;
};

}  // namespace kp

#endif  // KIMI_PLAN_SPECS_GPU_SPEC_H_
