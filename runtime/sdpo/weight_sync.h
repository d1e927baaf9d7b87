// Weight sync of the SDPO loop: the trainer (the sync group's root) broadcasts
// its full weights or its LoRA adapters to the rollout ranks after a step,
// tagged with a weight version the rollout checks. docs/weight-sync.md, "The
// runtime's sync", has the protocol.
//
// Protocol (one sync = SendWeights on the root, ReceiveWeights on every other
// member, all collective over the group, in this order):
//   1. header: one int64 broadcast [magic, version, tensors, payload bytes,
//      layout hash, bucket bytes, buckets];
//   2. plan: one int64 broadcast, per tensor a hash of (name, shape, dtype),
//      then per bucket (dtype code, elements);
//   3. the buckets: one broadcast each, of one dtype, at most bucket_bytes,
//      sent as their bytes (uint8: every backend has it, Gloo has no bf16).
// The plan lets a receiver that refuses (stale version, other layout) still
// take part: it receives every bucket into scratch, copies nothing and
// returns its error, so the group stays usable. The root does not learn of a
// refusal (the rollout reports it by its own channel).
//
// Packing: tensors in order, flattened; consecutive tensors of one dtype fill
// buckets of floor(bucket_bytes / element size) elements tightly, a tensor
// spilling into the next bucket in pieces; a dtype change closes the bucket.
// So a run of same-dtype tensors of E elements takes ceil(E / capacity)
// buckets. Double buffering: two bucket buffers; the root packs bucket k + 1
// while bucket k is in flight, a receiver unpacks bucket k while k + 1 lands
// (Communicator::StartBroadcast).
//
// Buffers live on the backend's device (CUDA for NCCL, else the CPU); the
// tensors may live anywhere (copies cross devices). The root's bucket size
// is the one used: a receiver follows the header's.
// Thread-safety: a sync uses its communicator and tensors from one thread.
#ifndef KIMI_PLAN_RUNTIME_SDPO_WEIGHT_SYNC_H_
#define KIMI_PLAN_RUNTIME_SDPO_WEIGHT_SYNC_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <torch/torch.h>

#include "common/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/model.h"

namespace kp::runtime {

enum class SyncMode { kFull, kLora };

/// "full" | "lora"; InvalidArgument naming --sync otherwise.
Result<SyncMode> ParseSyncMode(std::string_view s);
/// The inverse of ParseSyncMode.
const char* SyncModeName(SyncMode mode);

struct WeightSyncOptions {
  SyncMode mode = SyncMode::kFull;
  std::int64_t bucket_bytes = 64ll << 20;  ///< > 0; a tensor larger than a bucket is sent in pieces
  int root = 0;                            ///< the trainer's rank in the sync group
};

struct NamedTensor {
  std::string name;
  torch::Tensor tensor;
};

/// What a sync moves for `model`: kFull: every parameter and the routers' bias
/// buffers (they move by the bias update, not by gradients); kLora: the
/// adapters (LoraParameters) and the router biases. Registration order: module
/// by module (named_modules), each module's own parameters then its router
/// bias. The tensors alias the model's, so a receive writes the model.
/// kFull with `int4_experts` (a rollout serving the routed experts as
/// released INT4, weights/int4.h): each expert bank's gate, up and down are
/// NAME_packed and NAME_scale in their place: a bank on an INT4 base
/// (ExpertBankImpl::QuantizeBase) gives its buffers, a float bank the bits
/// of QuantizeInt4Weight made here (fresh tensors: the sender's side), so a
/// bf16 / fp32 actor syncs into an INT4 rollout at 0.5625 bytes a weight.
std::vector<NamedTensor> SyncedTensors(StageModelImpl& model, SyncMode mode, bool int4_experts = false);
/// The bytes a sync of `tensors` moves: the sum of numel x element size.
std::int64_t PayloadBytes(const std::vector<NamedTensor>& tensors);

struct SyncStats {
  std::int64_t version = 0;
  std::int64_t bytes = 0;       ///< payload bytes broadcast (excluding the header and plan)
  int buckets = 0;
  double seconds = 0;           ///< wall time of the whole sync on this rank, header to last bucket landed
  double gbytes_per_s() const;  ///< bytes / seconds / 1e9 (0 when seconds is 0)
};

/// Root side: broadcasts the header and plan, then the tensors packed in
/// buckets of at most bucket_bytes, double-buffered. Tensors keep their dtype.
/// Collective over `group` (every member calls SendWeights or ReceiveWeights
/// once per sync). Errors: InvalidArgument for bucket_bytes <= 0, a root
/// outside the group or not this rank; the communicator's failures.
Result<SyncStats> SendWeights(Communicator& group, const std::vector<NamedTensor>& tensors, std::int64_t version,
                              const WeightSyncOptions& options);

/// Receiver side: checks the header against its own `tensors` (a layout
/// mismatch is InvalidArgument naming the first differing tensor) and that
/// version >= min_version (else InvalidArgument "stale weights: version V <
/// required M"); a refusing rank still receives every bucket (into scratch)
/// and copies nothing. Otherwise unpacks every bucket into its tensors in
/// place (no autograd; the tensors must be contiguous) and returns once they
/// hold the root's values (CUDA: synchronised). options.root must match the
/// root's; options.bucket_bytes is not used (the header's rules).
Result<SyncStats> ReceiveWeights(Communicator& group, const std::vector<NamedTensor>& tensors,
                                 std::int64_t min_version, const WeightSyncOptions& options);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_SDPO_WEIGHT_SYNC_H_
