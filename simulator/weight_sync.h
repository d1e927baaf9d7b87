// Weight sync: moving the trainer's updated weights (or LoRA adapters) to
// the rollout engines after every step, the fifth system of the SDPO loop.
//
// Sizes come from the model spec and its storage format. Times come from
// the flow simulation on the cluster graph: one trainer node sends to R
// rollout nodes, each node's share split evenly over its GPUs, GPU i
// sending to GPU i of the next node (over RDMA on rail i % nics; over TCP
// through the node's one front-end port). With R > 1 the update moves as
// checkpoint-engine moves it (Kimi K2 technical report): in buckets,
// forwarded down a chain (fanout 1) or a k-ary tree of the rollout nodes,
// pipelined so that a node forwards bucket k while it receives bucket k+1,
// and every receiver copies each bucket into its weights (host-to-device
// or device-to-device) at a per-GPU rate while the network moves on.
//
// Not modelled: a fixed cost per bucket (kernel launches, the control
// round trip), so smaller buckets only ever help here; the GPU memory the
// buckets take (checkpoint-engine falls back to serial when short of it);
// copies contending with the network for PCIe; NCCL's own chunking inside a
// bucket; and the metadata gather.
//
// Thread-safety: free functions over const inputs; each simulation owns
// its event queue.
#ifndef KIMI_PLAN_SIMULATOR_WEIGHT_SYNC_H_
#define KIMI_PLAN_SIMULATOR_WEIGHT_SYNC_H_

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/units.h"
#include "planner/plan_request.h"
#include "simulator/cluster_graph.h"
#include "specs/gpu_spec.h"
#include "specs/model_spec.h"

namespace kp {

/// A full update in the storage format rollout engines serve: routed
/// experts at ExpertBytesPerParam (Kimi K2.6: INT4 with a bf16 scale per
/// 32 weights), everything else bf16. Kimi K2.6: 595.2 GB (seed 000).
Bytes FullUpdateBytes(const ModelSpec& m);

/// The LoRA adapters in bf16 (LoraParams of the planner). Kimi K2.6 at
/// rank 32: shared-outer 9.4 GB, per-expert 41.0 GB (seed 000).
Bytes LoraUpdateBytes(const ModelSpec& m, const LoraOptions& lora);

/// What a step sends to the rollout engines.
enum class SyncMode { kFull, kLoraSharedOuter, kLoraPerExpert };
/// "full", "lora-shared-outer", "lora-per-expert".
const char* SyncModeName(SyncMode m);
/// The inverse of SyncModeName; "--mode: ..." names the choices otherwise.
Result<SyncMode> ParseSyncMode(const std::string& name);

/// PCIe Gen5 x16's achievable host-to-device rate per GPU.
inline constexpr BytesPerSecond kPcieGen5H2d = GBps(55);
/// checkpoint-engine's measured IPC buckets are 1.4 to 3 GiB per GPU; 2 GiB
/// on each of 8 GPUs.
inline constexpr Bytes kDefaultSyncBucket = GiB(16);

struct SyncRequest {
  Bytes bytes;                  ///< the whole update, > 0
  int receivers = 1;            ///< rollout nodes (1..R); the trainer is node 0
  /// Bytes per bucket over the whole node, > 0 (each GPU carries bucket /
  /// gpus_per_node); the last bucket holds the rest. bucket >= bytes is
  /// one bucket: no pipelining.
  Bytes bucket;
  Network net = Network::kRdma;
  /// Per-GPU rate at which a receiver copies each bucket into its weights;
  /// 0: no copy (the bytes land in place).
  BytesPerSecond h2d{0};
  /// Also stage each bucket host-to-device on the trainer at `h2d` before
  /// sending it (checkpoint-engine's first stage: weights held in CPU memory).
  bool sender_h2d = false;
  int fanout = 1;               ///< children per node: 1 is a chain, k a k-ary tree
  /// Called as each bucket reaches the last receiver of the chain (or the
  /// highest-numbered one of a tree), with (buckets done, buckets): what a
  /// long simulation reports as progress. Optional.
  std::function<void(int, int)> on_progress = nullptr;
};

/// One bucket's way through the broadcast; receiver r is index r - 1.
struct BucketTimeline {
  Bytes bytes;
  Nanoseconds sent{0};                ///< the trainer starts sending it
  std::vector<Nanoseconds> received;  ///< its last byte reaches receiver r
  std::vector<Nanoseconds> applied;   ///< receiver r has copied it (== received without a copy)
};

struct SyncResult {
  SyncRequest request;
  int buckets = 0;
  Nanoseconds total{0};  ///< until the last receiver has applied the last bucket
  /// bytes / total: what each receiver gets (NCCL's algorithm bandwidth).
  BytesPerSecond bandwidth;
  /// bytes x receivers / total: what the whole broadcast delivers.
  BytesPerSecond aggregate_bandwidth;
  std::vector<BucketTimeline> timeline;
  std::uint64_t events = 0;  ///< events the simulation ran
};

/// Simulates one sync from node 0 to nodes 1..receivers of `cluster`.
/// Errors name the field: "--receivers: ...", "--bucket-gib: ...", "--h2d: ...",
/// "--fanout: ...", "bytes: ...".
/// The work a sync of `bytes` in buckets of `bucket` to `receivers` nodes
/// asks for, checked before it starts: buckets x receivers^2 must be at most
/// limits::kMaxSyncWork. The error names `flag`.
Status CheckSyncWork(std::int64_t receivers, Bytes bytes, Bytes bucket, const std::string& flag);

Result<SyncResult> SimulateSync(const ClusterGraph& cluster, const SyncRequest& request);

/// One row of time versus receiver count.
struct SyncScalingPoint {
  int receivers = 0;
  Nanoseconds broadcast{0};   ///< the pipelined chain
  /// The same transfer to one receiver, repeated for each in turn: what
  /// the broadcast saves.
  Nanoseconds sequential{0};
};

/// Everything `kimi-plan simulate sync` prints.
struct SyncReport {
  std::string model, gpu;
  SyncMode mode = SyncMode::kFull;
  int lora_rank = 0;  ///< 0 for a full update
  Bytes bytes;
  /// One trainer node to one rollout node, one bucket, no copy: the seed's
  /// comparison (Kimi K2.6 on H200: 95.23 s / 1.49 s full).
  SyncResult tcp, rdma;
  /// To `receivers` nodes over RDMA, chain, `bucket`, copies at kPcieGen5H2d.
  SyncResult broadcast;
  /// receivers = 1, 2, 4, ... and the requested count.
  std::vector<SyncScalingPoint> scaling;
};

/// Sizes the update for `mode` (LoRA with the planner's default targets at
/// `lora_rank`) and simulates it on nodes of `gpu`. Errors: "--lora-rank:
/// must be a positive integer", "--receivers: ...", "--bucket-gib: ...".
/// `progress`, when set, hears (receivers of the broadcast being simulated,
/// buckets done, buckets) as each scaling row's broadcast advances.
Result<SyncReport> WeightSyncReport(const ModelSpec& model, const GpuSpec& gpu, SyncMode mode,
                                    int lora_rank, int receivers, Bytes bucket,
                                    const std::function<void(int, int, int)>& progress = nullptr);

/// Keys: request fields, `buckets`, `total_s`, `bandwidth_bytes_per_s`,
/// `aggregate_bandwidth_bytes_per_s`, `events`, `timeline` (one object per
/// bucket: `bytes`, `sent_s`, `received_s`, `applied_s`).
nlohmann::json ToJson(const SyncResult& r);
/// Schema `kimi-plan.sync/1`. Keys: `model`, `gpu`, `mode`, `lora_rank`,
/// `bytes`, `tcp_s`, `rdma_s`, `broadcast` (as above), `scaling`
/// (`receivers`, `broadcast_s`, `sequential_s`).
nlohmann::json ToJson(const SyncReport& r);
/// The plain-text tables of the command's default output.
std::string FormatSyncReport(const SyncReport& r);

}  // namespace kp

#endif  // KIMI_PLAN_SIMULATOR_WEIGHT_SYNC_H_
