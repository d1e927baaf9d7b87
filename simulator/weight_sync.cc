#include "simulator/weight_sync.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>

#include "common/limits.h"
#include "common/table.h"
#include "common/text.h"
#include "planner/memory_model.h"
#include "simulator/event_queue.h"
#include "simulator/flow_network.h"
#include "specs/param_count.h"

namespace kp {

namespace {

constexpr double kBf16 = 2;
// A simulation's cost grows with the bucket count; past this a smaller
// bucket changes nothing a planner cares about.
constexpr double kMaxBuckets = 100'000;

}  // namespace

Bytes FullUpdateBytes(const ModelSpec& m) {
  const ParamCount pc = CountParams(m);
  const double routed = pc.sum.routed_experts;
  return Bytes(ExpertBytesPerParam(m) * routed + kBf16 * (pc.total - routed));
}

Bytes LoraUpdateBytes(const ModelSpec& m, const LoraOptions& lora) {
  return Bytes(kBf16 * LoraParams(m, lora));
}

const char* SyncModeName(SyncMode m) {
  switch (m) {
    case SyncMode::kFull: return "full";
    case SyncMode::kLoraSharedOuter: return "lora-shared-outer";
    case SyncMode::kLoraPerExpert: return "lora-per-expert";
  }
  return "?";
}

Result<SyncMode> ParseSyncMode(const std::string& name) {
  for (SyncMode m : {SyncMode::kFull, SyncMode::kLoraSharedOuter, SyncMode::kLoraPerExpert}) {
    if (name == SyncModeName(m)) return m;
  }
  return Status::InvalidArgument("--mode: '" + QuoteBounded(name) + "' is not one of full, lora-shared-outer, lora-per-expert");
}

Status CheckSyncWork(std::int64_t receivers, Bytes bytes, Bytes bucket, const std::string& flag) {
  // Each bucket's hop shares links with every other transfer in flight, so
  // the work grows as buckets x receivers^2 (measured: 37 buckets to 256
  // receivers, 2.4M, take 7 s).
  const double buckets = std::ceil(bytes / bucket);
  const double work = buckets * double(receivers) * double(receivers);
  if (work <= double(limits::kMaxSyncWork)) return Status::Ok();
  return Status::InvalidArgument(flag + ": " + std::to_string(receivers) + " receivers x " +
                                 std::to_string(static_cast<long long>(buckets)) + " buckets (x receivers) = " +
                                 std::to_string(static_cast<long long>(work)) + ", more than the " +
                                 std::to_string(limits::kMaxSyncWork) + " one simulated sync may do (docs/limits.md)");
}

namespace {

Status ValidateSync(const ClusterGraph& c, const SyncRequest& r) {
  if (!(r.bytes.value() > 0)) return Status::InvalidArgument("bytes: must be > 0");
  if (r.receivers <= 0) return Status::InvalidArgument("--receivers: must be a positive integer");
  if (r.receivers + 1 > c.nodes()) {
    return Status::InvalidArgument("--receivers: " + std::to_string(r.receivers) + " receivers and the trainer need " +
                                   std::to_string(r.receivers + 1) + " nodes; the cluster has " +
                                   std::to_string(c.nodes()));
  }
  if (!(r.bucket.value() > 0)) return Status::InvalidArgument("--bucket-gib: must be > 0 bytes");
  if (std::ceil(r.bytes / r.bucket) > kMaxBuckets) {
    return Status::InvalidArgument("--bucket-gib: " + FormatGB(r.bytes.value()) + " in buckets of " +
                                   FormatGB(r.bucket.value()) + " is more than 100000 buckets");
  }
  KP_RETURN_IF_ERROR(CheckSyncWork(r.receivers, r.bytes, r.bucket, "--receivers"));
  if (!(r.h2d.value() >= 0)) return Status::InvalidArgument("--h2d: must be >= 0 bytes per second");
  if (r.fanout <= 0) return Status::InvalidArgument("--fanout: must be a positive integer");
  return Status::Ok();
}

// One checkpoint-engine broadcast on its own event queue. Node 0 is the
// trainer; node r's parent is (r - 1) / fanout, so fanout 1 is the chain
// 0 -> 1 -> 2 -> ... Each parent-child edge (a hop) sends one bucket at a
// time, in order, as soon as the parent holds it: that is the pipeline.
class Broadcast {
 public:
  Broadcast(const ClusterGraph& c, const SyncRequest& r)
      : cluster_(c), req_(r), net_(q_, c.Capacities()), gpus_(c.gpus_per_node()) {
    buckets_ = static_cast<int>(std::ceil(r.bytes / r.bucket));
    for (int k = 0; k < buckets_; ++k) {
      BucketTimeline t;
      t.bytes = std::min(r.bucket, r.bytes - r.bucket * k);
      t.received.assign(r.receivers, Nanoseconds(0));
      t.applied.assign(r.receivers, Nanoseconds(0));
      timeline_.push_back(std::move(t));
    }
    held_.assign(r.receivers + 1, 0);
    for (int n = 0; n <= r.receivers; ++n) copy_.emplace_back(q_);
    for (int child = 1; child <= r.receivers; ++child) hops_.push_back(MakeHop((child - 1) / r.fanout, child));
  }

  SyncResult Run() {
    if (req_.sender_h2d && req_.h2d.value() > 0) {
      for (int k = 0; k < buckets_; ++k) {
        copy_[0].Submit(CopyTime(k), [this, k] {
          held_[0] = k + 1;
          SendFrom(0);
        });
      }
    } else {
      held_[0] = buckets_;
      SendFrom(0);
    }
    q_.Run();
    return Summary();
  }

 private:
  struct Hop {
    int parent = 0, child = 0;
    int next = 0;        // the next bucket to send
    bool busy = false;
    int pieces_left = 0;  // of the bucket in flight, one per GPU
    std::vector<std::vector<LinkId>> paths;  // per GPU, computed once
  };

  Hop MakeHop(int parent, int child) const {
    Hop h;
    h.parent = parent;
    h.child = child;
    for (int i = 0; i < gpus_; ++i) h.paths.push_back(cluster_.Path({parent, i}, {child, i}, req_.net));
    return h;
  }

  // Every GPU copies its even share of the bucket at the per-GPU rate, in
  // parallel, so the node takes one share's time.
  Nanoseconds CopyTime(int k) const {
    return ToNanoseconds(TransferTime(timeline_[k].bytes / gpus_, req_.h2d));
  }

  void SendFrom(int node) {
    for (size_t h = 0; h < hops_.size(); ++h) {
      if (hops_[h].parent == node) TrySend(h);
    }
  }

  void TrySend(size_t h) {
    Hop& hop = hops_[h];
    if (hop.busy || hop.next >= held_[hop.parent]) return;
    const int k = hop.next++;
    hop.busy = true;
    hop.pieces_left = gpus_;
    if (hop.parent == 0 && k == trainer_started_) {  // the first of the trainer's hops to send it
      timeline_[k].sent = q_.now();
      ++trainer_started_;
    }
    const Bytes piece = timeline_[k].bytes / gpus_;
    for (int i = 0; i < gpus_; ++i) {
      net_.Start(hop.paths[i], piece, [this, h, k] {
        if (--hops_[h].pieces_left == 0) Arrived(h, k);
      });
    }
  }

  void Arrived(size_t h, int k) {
    Hop& hop = hops_[h];
    hop.busy = false;
    const int child = hop.child;
    timeline_[k].received[child - 1] = q_.now();
    held_[child] = k + 1;  // a hop delivers in order
    if (child == req_.receivers && req_.on_progress) req_.on_progress(k + 1, buckets_);
    if (req_.h2d.value() > 0) {
      copy_[child].Submit(CopyTime(k), [this, child, k] { timeline_[k].applied[child - 1] = q_.now(); });
    } else {
      timeline_[k].applied[child - 1] = q_.now();
    }
    SendFrom(child);
    TrySend(h);
  }

  SyncResult Summary() {
    SyncResult s;
    s.request = req_;
    s.buckets = buckets_;
    // Not q_.now(): a stale drain event may run after the last delivery.
    for (const BucketTimeline& t : timeline_) {
      for (Nanoseconds a : t.applied) s.total = std::max(s.total, a);
    }
    const double secs = ToSeconds(s.total).value();
    s.bandwidth = BytesPerSecond(secs > 0 ? req_.bytes.value() / secs : 0.0);
    s.aggregate_bandwidth = s.bandwidth * req_.receivers;
    s.timeline = std::move(timeline_);
    s.events = q_.processed();
    return s;
  }

  const ClusterGraph& cluster_;
  const SyncRequest req_;
  EventQueue q_;
  FlowNetwork net_;
  const int gpus_;
  int buckets_ = 0;
  std::vector<BucketTimeline> timeline_;
  int trainer_started_ = 0;       // buckets the trainer has started sending
  std::vector<int> held_;         // per node: buckets [0, held) are there
  std::deque<Stream> copy_;       // per node: its copy engine
  std::vector<Hop> hops_;
};

}  // namespace

Result<SyncResult> SimulateSync(const ClusterGraph& cluster, const SyncRequest& request) {
  KP_RETURN_IF_ERROR(ValidateSync(cluster, request));
  // The simulation captures `this` in its callbacks: keep it in one place.
  auto sim = std::make_unique<Broadcast>(cluster, request);
  return sim->Run();
}

namespace {

Result<SyncResult> SimulateOnFreshCluster(const GpuSpec& gpu, const SyncRequest& r) {
  KP_ASSIGN_OR_RETURN(ClusterGraph cluster, BuildCluster(gpu, r.receivers + 1));
  return SimulateSync(cluster, r);
}

Result<Bytes> UpdateBytes(const ModelSpec& model, SyncMode mode, int lora_rank) {
  if (mode == SyncMode::kFull) return FullUpdateBytes(model);
  if (lora_rank <= 0) return Status::InvalidArgument("--lora-rank: must be a positive integer");
  LoraOptions lora;
  lora.rank = lora_rank;
  lora.experts = mode == SyncMode::kLoraPerExpert ? LoraExperts::kPerExpert : LoraExperts::kSharedOuter;
  return LoraUpdateBytes(model, lora);
}

// 1, 2, 4, ... below `receivers`, then `receivers` itself.
std::vector<int> ScalingCounts(int receivers) {
  std::vector<int> counts;
  for (int r = 1; r < receivers; r *= 2) counts.push_back(r);
  counts.push_back(receivers);
  return counts;
}

}  // namespace

Result<SyncReport> WeightSyncReport(const ModelSpec& model, const GpuSpec& gpu, SyncMode mode, int lora_rank,
                                    int receivers, Bytes bucket, const std::function<void(int, int, int)>& progress) {
  if (receivers <= 0) return Status::InvalidArgument("--receivers: must be a positive integer");
  SyncReport rep;
  rep.model = model.name;
  rep.gpu = gpu.name;
  rep.mode = mode;
  rep.lora_rank = mode == SyncMode::kFull ? 0 : lora_rank;
  KP_ASSIGN_OR_RETURN(rep.bytes, UpdateBytes(model, mode, lora_rank));
  // The seed's comparison: one node to one node, whole update, nothing else.
  for (Network net : {Network::kTcp, Network::kRdma}) {
    SyncRequest p2p{.bytes = rep.bytes, .receivers = 1, .bucket = rep.bytes, .net = net};
    KP_ASSIGN_OR_RETURN(SyncResult r, SimulateOnFreshCluster(gpu, p2p));
    (net == Network::kTcp ? rep.tcp : rep.rdma) = std::move(r);
  }
  // The scaling series grows to `receivers`; its largest run bounds the
  // work of every other, so the limit is checked once, before any runs.
  if (!(bucket.value() > 0)) return Status::InvalidArgument("--bucket-gib: must be > 0 bytes");
  KP_RETURN_IF_ERROR(CheckSyncWork(receivers, rep.bytes, bucket, "--receivers"));
  SyncRequest bcast{.bytes = rep.bytes, .receivers = receivers, .bucket = bucket, .h2d = kPcieGen5H2d};
  Nanoseconds one{0};
  for (int r : ScalingCounts(receivers)) {
    bcast.receivers = r;
    if (progress) bcast.on_progress = [&progress, r](int done, int total) { progress(r, done, total); };
    KP_ASSIGN_OR_RETURN(SyncResult res, SimulateOnFreshCluster(gpu, bcast));
    if (r == 1) one = res.total;
    rep.scaling.push_back({r, res.total, one * r});
    if (r == receivers) rep.broadcast = std::move(res);
  }
  return rep;
}

nlohmann::json ToJson(const SyncResult& r) {
  nlohmann::json timeline = nlohmann::json::array();
  for (const BucketTimeline& t : r.timeline) {
    nlohmann::json received = nlohmann::json::array(), applied = nlohmann::json::array();
    for (Nanoseconds x : t.received) received.push_back(ToSeconds(x).value());
    for (Nanoseconds x : t.applied) applied.push_back(ToSeconds(x).value());
    timeline.push_back({{"bytes", t.bytes.value()},
                        {"sent_s", ToSeconds(t.sent).value()},
                        {"received_s", received},
                        {"applied_s", applied}});
  }
  const SyncRequest& q = r.request;
  return {{"bytes", q.bytes.value()},
          {"network", NetworkName(q.net)},
          {"receivers", q.receivers},
          {"fanout", q.fanout},
          {"bucket_bytes", q.bucket.value()},
          {"h2d_bytes_per_s", q.h2d.value()},
          {"sender_h2d", q.sender_h2d},
          {"buckets", r.buckets},
          {"total_s", ToSeconds(r.total).value()},
          {"bandwidth_bytes_per_s", r.bandwidth.value()},
          {"aggregate_bandwidth_bytes_per_s", r.aggregate_bandwidth.value()},
          {"events", r.events},
          {"timeline", timeline}};
}

nlohmann::json ToJson(const SyncReport& r) {
  nlohmann::json scaling = nlohmann::json::array();
  for (const SyncScalingPoint& p : r.scaling) {
    scaling.push_back({{"receivers", p.receivers},
                       {"broadcast_s", ToSeconds(p.broadcast).value()},
                       {"sequential_s", ToSeconds(p.sequential).value()}});
  }
  return {{"schema", "kimi-plan.sync/1"},
          {"model", r.model},
          {"gpu", r.gpu},
          {"mode", SyncModeName(r.mode)},
          {"lora_rank", r.mode == SyncMode::kFull ? nlohmann::json(nullptr) : nlohmann::json(r.lora_rank)},
          {"bytes", r.bytes.value()},
          {"tcp_s", ToSeconds(r.tcp.total).value()},
          {"rdma_s", ToSeconds(r.rdma.total).value()},
          {"broadcast", ToJson(r.broadcast)},
          {"scaling", scaling}};
}

namespace {

std::string FormatDuration(Nanoseconds ns) {
  const double s = ToSeconds(ns).value();
  return s >= 1 ? FormatFixed(s, 2) + " s" : FormatFixed(s * 1e3, 1) + " ms";
}

std::string FormatRate(BytesPerSecond r) { return FormatFixed(r.value() / kGB, 2) + " GB/s"; }

}  // namespace

std::string FormatSyncReport(const SyncReport& r) {
  std::string out = r.model + " on " + r.gpu + ": " + SyncModeName(r.mode);
  if (r.mode != SyncMode::kFull) out += " rank " + std::to_string(r.lora_rank);
  out += ", " + FormatGB(r.bytes.value()) + " per update\n\n";

  out += "one trainer node to one rollout node\n";
  Table p2p({"network", "time", "bandwidth"});
  p2p.AddRow({"tcp", FormatDuration(r.tcp.total), FormatRate(r.tcp.bandwidth)});
  p2p.AddRow({"rdma", FormatDuration(r.rdma.total), FormatRate(r.rdma.bandwidth)});
  out += p2p.Render() + "\n";

  const SyncRequest& b = r.broadcast.request;
  out += "pipelined chain broadcast over rdma: " + std::to_string(r.broadcast.buckets) +
         (r.broadcast.buckets == 1 ? " bucket" : " buckets") + " of up to " + FormatGB(b.bucket.value()) +
         ", copies at " + FormatRate(b.h2d) + " per GPU\n";
  Table scaling({"receivers", "broadcast", "one after another"});
  for (const SyncScalingPoint& p : r.scaling) {
    scaling.AddRow({std::to_string(p.receivers), FormatDuration(p.broadcast), FormatDuration(p.sequential)});
  }
  out += scaling.Render();
  return out;
}

}  // namespace kp
