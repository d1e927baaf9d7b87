#include "runtime/sdpo/weight_sync.h"

#include <algorithm>
#include <array>
#include <memory>
#include <sstream>
#include <unordered_set>

#include "common/clock.h"
#include "runtime/comm/device.h"
#include "runtime/model/int4_linear.h"

namespace kp::runtime {

namespace {

constexpr std::int64_t kMagic = 0x6b7073796e6331;  // "kpsync1"

// The header's fields, in broadcast order.
enum HeaderField { kMagicField, kVersion, kTensors, kBytes, kLayoutHash, kBucketBytes, kBuckets, kHeaderFields };

// A run of one tensor's flattened elements [offset, offset + numel) in a bucket.
struct Piece {
  std::size_t tensor;
  std::int64_t offset, numel;
};
struct Bucket {
  torch::ScalarType dtype;
  std::int64_t numel = 0;
  std::vector<Piece> pieces;
};

std::uint64_t Fnv1a(std::uint64_t h, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// What must agree between the sender's tensor and the receiver's.
std::string Describe(const NamedTensor& t) {
  return t.name + " " + c10::str(t.tensor.sizes()) + " " + c10::toString(t.tensor.scalar_type());
}

std::int64_t TensorHash(const NamedTensor& t) {
  const std::string d = Describe(t);
  return static_cast<std::int64_t>(Fnv1a(14695981039346656037ull, d.data(), d.size()));
}

std::int64_t LayoutHash(const std::vector<std::int64_t>& tensor_hashes) {
  return static_cast<std::int64_t>(
      Fnv1a(14695981039346656037ull, tensor_hashes.data(), tensor_hashes.size() * sizeof(std::int64_t)));
}

// The packing of weight_sync.h: same-dtype runs fill buckets tightly.
Result<std::vector<Bucket>> PlanBuckets(const std::vector<NamedTensor>& tensors, std::int64_t bucket_bytes) {
  std::vector<Bucket> buckets;
  std::int64_t capacity = 0;  // of the last bucket, in elements
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const torch::Tensor& t = tensors[i].tensor;
    const torch::ScalarType dtype = t.scalar_type();
    if (t.numel() == 0) continue;
    if (buckets.empty() || buckets.back().dtype != dtype) {
      capacity = bucket_bytes / static_cast<std::int64_t>(t.element_size());
      if (capacity == 0)
        return Status::InvalidArgument("weight sync: a bucket of " + std::to_string(bucket_bytes) +
                                       " bytes cannot hold one " + c10::toString(dtype) + " element");
      buckets.push_back(Bucket{dtype, 0, {}});
    }
    for (std::int64_t offset = 0; offset < t.numel();) {
      if (buckets.back().numel == capacity) buckets.push_back(Bucket{dtype, 0, {}});
      Bucket& b = buckets.back();
      const std::int64_t take = std::min(t.numel() - offset, capacity - b.numel);
      b.pieces.push_back(Piece{i, offset, take});
      b.numel += take;
      offset += take;
    }
  }
  return buckets;
}

// The buffers follow the tensors: a CUDA tensor's device, else CUDA for
// NCCL (which takes only CUDA tensors), else the CPU.
torch::Device SyncDevice(const Communicator& group, const std::vector<NamedTensor>& tensors) {
  for (const NamedTensor& t : tensors)
    if (t.tensor.is_cuda()) return t.tensor.device();
  return group.backend() == "nccl" ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

torch::Tensor Int64s(const std::vector<std::int64_t>& v, const torch::Device& device) {
  return torch::tensor(v, torch::TensorOptions().dtype(torch::kLong)).to(device);
}

std::vector<std::int64_t> ToVector(const torch::Tensor& t) {
  const torch::Tensor c = t.cpu().contiguous();
  return std::vector<std::int64_t>(c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel());
}

// Bucket buffers: two slots, each reallocated when too small for a bucket
// or of another dtype. A bucket is packed and unpacked through `typed` and
// travels as its bytes (`wire`, the same memory): Gloo has no bf16.
struct Slots {
  std::array<torch::Tensor, 2> memory, typed, wire;
  void Prepare(std::size_t s, const Bucket& b, const torch::Device& device) {
    if (!memory[s].defined() || memory[s].scalar_type() != b.dtype || memory[s].numel() < b.numel)
      memory[s] = torch::empty({b.numel}, torch::TensorOptions().dtype(b.dtype).device(device));
    typed[s] = memory[s].narrow(0, 0, b.numel);
    wire[s] = typed[s].view(torch::kByte);
  }
};

void Pack(const Bucket& b, const std::vector<NamedTensor>& tensors, torch::Tensor& buffer) {
  std::int64_t at = 0;
  for (const Piece& p : b.pieces) {
    buffer.narrow(0, at, p.numel).copy_(tensors[p.tensor].tensor.detach().reshape(-1).narrow(0, p.offset, p.numel));
    at += p.numel;
  }
}

void Unpack(const Bucket& b, const torch::Tensor& buffer, const std::vector<NamedTensor>& tensors) {
  std::int64_t at = 0;
  for (const Piece& p : b.pieces) {
    tensors[p.tensor].tensor.detach().view(-1).narrow(0, p.offset, p.numel).copy_(buffer.narrow(0, at, p.numel));
    at += p.numel;
  }
}

Status CheckGroup(const Communicator& group, const WeightSyncOptions& options) {
  if (options.root < 0 || options.root >= group.size())
    return Status::InvalidArgument("weight sync: root " + std::to_string(options.root) + " is not a rank of a group of " +
                                   std::to_string(group.size()));
  return Status::Ok();
}

SyncStats Finish(const torch::Device& device, std::int64_t version, std::int64_t bytes, std::size_t buckets,
                 const Stopwatch& watch) {
  Synchronize(device);
  SyncStats s;
  s.version = version;
  s.bytes = bytes;
  s.buckets = static_cast<int>(buckets);
  s.seconds = watch.Seconds();
  return s;
}

// Root: pack bucket k into slot k % 2 once that slot's previous broadcast
// (bucket k - 2) is done, so packing overlaps the broadcast in flight.
Status SendBuckets(Communicator& group, const std::vector<Bucket>& buckets, const std::vector<NamedTensor>& tensors,
                   int root, const torch::Device& device) {
  Slots slots;
  std::array<std::unique_ptr<PendingOp>, 2> ops;
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    const std::size_t s = k % 2;
    if (ops[s]) KP_RETURN_IF_ERROR(ops[s]->Wait());
    ops[s].reset();
    slots.Prepare(s, buckets[k], device);
    Pack(buckets[k], tensors, slots.typed[s]);
    KP_ASSIGN_OR_RETURN(ops[s], group.StartBroadcast(slots.wire[s], root));
  }
  for (std::size_t k = buckets.size(); k < buckets.size() + 2; ++k)  // the older one first
    if (ops[k % 2]) KP_RETURN_IF_ERROR(ops[k % 2]->Wait());
  return Status::Ok();
}

// Receiver: bucket k + 1 lands in the other slot while bucket k is unpacked.
Status ReceiveBuckets(Communicator& group, const std::vector<Bucket>& buckets,
                      const std::vector<NamedTensor>& tensors, int root, const torch::Device& device) {
  Slots slots;
  std::array<std::unique_ptr<PendingOp>, 2> ops;
  auto start = [&](std::size_t k) -> Status {
    slots.Prepare(k % 2, buckets[k], device);
    KP_ASSIGN_OR_RETURN(ops[k % 2], group.StartBroadcast(slots.wire[k % 2], root));
    return Status::Ok();
  };
  if (!buckets.empty()) KP_RETURN_IF_ERROR(start(0));
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    if (k + 1 < buckets.size()) KP_RETURN_IF_ERROR(start(k + 1));
    KP_RETURN_IF_ERROR(ops[k % 2]->Wait());
    ops[k % 2].reset();
    torch::NoGradGuard no_grad;
    Unpack(buckets[k], slots.typed[k % 2], tensors);
  }
  return Status::Ok();
}

// The receiver's own layout against the sender's: the header's hash, then
// tensor by tensor so that the error names the first that differs.
Status CheckLayout(const std::vector<NamedTensor>& tensors, std::int64_t sender_layout_hash,
                   const std::vector<std::int64_t>& sender_hashes) {
  std::vector<std::int64_t> mine;
  for (const NamedTensor& t : tensors) mine.push_back(TensorHash(t));
  if (mine.size() != sender_hashes.size() || LayoutHash(mine) != sender_layout_hash) {
    std::size_t i = 0;
    while (i < mine.size() && i < sender_hashes.size() && mine[i] == sender_hashes[i]) ++i;
    std::ostringstream o;
    o << "weight sync: layout differs from the sender's (" << sender_hashes.size() << " tensors, this rank "
      << tensors.size() << ") at tensor " << i << ": ";
    if (i < tensors.size()) o << "this rank has " << Describe(tensors[i]) << ", the sender another name, shape or dtype";
    else o << "this rank has none";
    return Status::InvalidArgument(o.str());
  }
  for (const NamedTensor& t : tensors)
    if (!t.tensor.is_contiguous())
      return Status::InvalidArgument("weight sync: " + t.name + " is not contiguous (cannot be written in place)");
  return Status::Ok();
}

// Whether this receiver takes the sync: the version rule, then the layout.
Status Accept(const std::vector<NamedTensor>& tensors, const std::vector<std::int64_t>& header,
              const std::vector<std::int64_t>& sender_hashes, std::int64_t min_version) {
  if (header[kVersion] < min_version)
    return Status::InvalidArgument("stale weights: version " + std::to_string(header[kVersion]) + " < required " +
                                   std::to_string(min_version));
  return CheckLayout(tensors, header[kLayoutHash], sender_hashes);
}

}  // namespace

std::int64_t PayloadBytes(const std::vector<NamedTensor>& tensors) {
  std::int64_t bytes = 0;
  for (const NamedTensor& t : tensors) bytes += t.tensor.numel() * static_cast<std::int64_t>(t.tensor.element_size());
  return bytes;
}

Result<SyncMode> ParseSyncMode(std::string_view s) {
  if (s == "full") return SyncMode::kFull;
  if (s == "lora") return SyncMode::kLora;
  return Status::InvalidArgument("--sync: must be full or lora, got \"" + std::string(s) + "\"");
}

const char* SyncModeName(SyncMode mode) { return mode == SyncMode::kFull ? "full" : "lora"; }

double SyncStats::gbytes_per_s() const { return seconds > 0 ? double(bytes) / seconds / 1e9 : 0; }

namespace {

// An expert bank's weight `w` (gate, up or down) as INT4: its buffers on an
// INT4 base, else quantised now.
void AddInt4(torch::nn::Module& bank, const std::string& prefix, const std::string& w, const torch::Tensor& weight,
             std::vector<NamedTensor>& out) {
  const auto buffers = bank.named_buffers(/*recurse=*/false);
  if (const torch::Tensor* packed = buffers.find(w + "_packed")) {
    out.push_back({prefix + w + "_packed", *packed});
    out.push_back({prefix + w + "_scale", *buffers.find(w + "_scale")});
    return;
  }
  const Int4Weight q = QuantizeInt4Weight(weight);
  out.push_back({prefix + w + "_packed", q.packed});
  out.push_back({prefix + w + "_scale", q.scales});
}

}  // namespace

std::vector<NamedTensor> SyncedTensors(StageModelImpl& model, SyncMode mode, bool int4_experts) {
  std::unordered_set<std::string> adapters;
  for (const auto& [name, t] : model.LoraParameters()) adapters.insert(name);
  std::vector<NamedTensor> out;
  for (const auto& m : model.named_modules()) {
    const std::string prefix = m.key().empty() ? "" : m.key() + ".";
    const bool int4_bank = int4_experts && mode == SyncMode::kFull && dynamic_cast<ExpertBankImpl*>(m.value().get());
    for (const auto& p : m.value()->named_parameters(/*recurse=*/false)) {
      const std::string name = prefix + p.key();
      if (int4_bank && (p.key() == "gate" || p.key() == "up" || p.key() == "down")) {
        AddInt4(*m.value(), prefix, p.key(), p.value(), out);
        continue;
      }
      if (mode == SyncMode::kFull || adapters.count(name)) out.push_back({name, p.value()});
    }
    if (auto* router = dynamic_cast<RouterImpl*>(m.value().get())) out.push_back({prefix + "bias", router->bias()});
  }
  return out;
}

Result<SyncStats> SendWeights(Communicator& group, const std::vector<NamedTensor>& tensors, std::int64_t version,
                              const WeightSyncOptions& options) {
  KP_RETURN_IF_ERROR(CheckGroup(group, options));
  if (group.rank() != options.root)
    return Status::InvalidArgument("weight sync: SendWeights on rank " + std::to_string(group.rank()) +
                                   ", the root is " + std::to_string(options.root));
  if (options.bucket_bytes <= 0)
    return Status::InvalidArgument("weight sync: bucket_bytes must be positive, got " +
                                   std::to_string(options.bucket_bytes));
  KP_ASSIGN_OR_RETURN(std::vector<Bucket> buckets, PlanBuckets(tensors, options.bucket_bytes));
  const Stopwatch watch;
  const torch::Device device = SyncDevice(group, tensors);
  std::vector<std::int64_t> plan;
  for (const NamedTensor& t : tensors) plan.push_back(TensorHash(t));
  const std::int64_t bytes = PayloadBytes(tensors);
  torch::Tensor header = Int64s({kMagic, version, std::int64_t(tensors.size()), bytes, LayoutHash(plan),
                                 options.bucket_bytes, std::int64_t(buckets.size())},
                                device);
  for (const Bucket& b : buckets) {
    plan.push_back(static_cast<std::int64_t>(b.dtype));
    plan.push_back(b.numel);
  }
  torch::Tensor plan_t = Int64s(plan, device);
  KP_RETURN_IF_ERROR(group.Broadcast(header, options.root));
  KP_RETURN_IF_ERROR(group.Broadcast(plan_t, options.root));
  KP_RETURN_IF_ERROR(SendBuckets(group, buckets, tensors, options.root, device));
  return Finish(device, version, bytes, buckets.size(), watch);
}

Result<SyncStats> ReceiveWeights(Communicator& group, const std::vector<NamedTensor>& tensors,
                                 std::int64_t min_version, const WeightSyncOptions& options) {
  KP_RETURN_IF_ERROR(CheckGroup(group, options));
  if (group.rank() == options.root)
    return Status::InvalidArgument("weight sync: ReceiveWeights on the root (rank " + std::to_string(options.root) + ")");
  const Stopwatch watch;
  const torch::Device device = SyncDevice(group, tensors);
  torch::Tensor header_t = torch::zeros({std::int64_t(kHeaderFields)}, torch::TensorOptions().dtype(torch::kLong).device(device));
  KP_RETURN_IF_ERROR(group.Broadcast(header_t, options.root));
  const std::vector<std::int64_t> header = ToVector(header_t);
  if (header[kMagicField] != kMagic)
    return Status::Internal("weight sync: the root's header is not a weight-sync header (magic mismatch)");
  const std::int64_t n = header[kTensors], n_buckets = header[kBuckets];
  torch::Tensor plan_t = torch::zeros({n + 2 * n_buckets}, torch::TensorOptions().dtype(torch::kLong).device(device));
  KP_RETURN_IF_ERROR(group.Broadcast(plan_t, options.root));
  const std::vector<std::int64_t> plan = ToVector(plan_t);
  const std::vector<std::int64_t> sender_hashes(plan.begin(), plan.begin() + n);

  // The sender's buckets as (dtype, elements); a refusing rank receives these into scratch.
  std::vector<Bucket> sent(n_buckets);
  for (std::int64_t k = 0; k < n_buckets; ++k)
    sent[k] = Bucket{static_cast<torch::ScalarType>(plan[n + 2 * k]), plan[n + 2 * k + 1], {}};
  Status accept = Accept(tensors, header, sender_hashes, min_version);
  std::vector<Bucket> buckets;
  if (accept.ok()) {
    Result<std::vector<Bucket>> mine = PlanBuckets(tensors, header[kBucketBytes]);
    accept = mine.status();
    if (mine.ok()) buckets = std::move(mine).value();
    if (accept.ok() && buckets.size() != sent.size())
      accept = Status::Internal("weight sync: the sender packed " + std::to_string(sent.size()) +
                                " buckets, this rank's plan has " + std::to_string(buckets.size()));
  }
  if (!accept.ok()) {
    std::vector<NamedTensor> none;
    KP_RETURN_IF_ERROR(ReceiveBuckets(group, sent, none, options.root, device));
    return accept;
  }
  KP_RETURN_IF_ERROR(ReceiveBuckets(group, buckets, tensors, options.root, device));
  return Finish(device, header[kVersion], header[kBytes], buckets.size(), watch);
}

}  // namespace kp::runtime
