// Communication between the runtime's ranks, behind one small interface so
// that the pipeline, data- and expert-parallel code runs unchanged over c10d
// (Gloo on CPU, NCCL on CUDA: c10d_communicator.h) and over an in-process
// fake whose ranks are threads (in_process_communicator.h) in tests.
//
// Contract: every call is collective over the communicator's group in the
// order the ranks make them (point-to-point calls pair a Send with the peer's
// Recv of the same tag); tensors are dense and contiguous (PR #4312's finding:
// c10d rejects non-overlapping-and-dense violations on P2P); a call blocks
// until its tensors may be reused, except a Start* call, whose tensors may be
// reused once its PendingOp's Wait returns (its place in the collective order
// is where it was started). A failure (a peer that died or hung past
// the timeout) is a Status naming the peer and the operation, never a hang.
// Thread-safety: one communicator is used from one thread.
#ifndef KIMI_PLAN_RUNTIME_COMM_COMMUNICATOR_H_
#define KIMI_PLAN_RUNTIME_COMM_COMMUNICATOR_H_

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/status.h"

namespace kp::runtime {

/// What a failed collective inside an autograd node's forward or backward
/// throws: autograd gives no other way out. The rule (docs/architecture.md,
/// "Errors"): only code that runs inside autograd (the TP, CP and EP
/// exchanges of runtime/model/) throws it, always made from a failed Status;
/// the training step's entry points (PipelineRank, TrainSession) catch it
/// and return it as an IoError Status. Nothing else throws across a library
/// boundary.
class CommunicationError : public std::runtime_error {
 public:
  explicit CommunicationError(const Status& s) : std::runtime_error(s.message()) {}
};

/// A collective started by Communicator::Start*, in flight. Thread-safety: as
/// its communicator's (one thread).
class PendingOp {
 public:
  /// Destroying an op that was not waited for waits for it (ignoring its
  /// failure), so its tensors are never written after it is gone.
  virtual ~PendingOp() = default;
  /// Blocks until the operation is done and its tensor may be read and
  /// reused; a failure as the blocking call would report it. Call once.
  virtual Status Wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  /// This rank's index in the group, 0 .. size() - 1.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "gloo", "nccl" or "in-process".
  virtual std::string backend() const = 0;

  /// Sends `t` to group rank `dst`; pairs with dst's Recv(src = rank(), tag).
  virtual Status Send(const torch::Tensor& t, int dst, int tag) = 0;
  /// Receives into `t` (its shape and dtype must match the sent tensor).
  virtual Status Recv(torch::Tensor& t, int src, int tag) = 0;
  /// Sums `t` over the group in place, in an order that does not depend on
  /// timing (so a reduction is reproducible run to run).
  virtual Status AllReduceSum(torch::Tensor& t) = 0;
  /// Sums `t` over the group into root's `t`, in an order that does not
  /// depend on timing; the other ranks' `t` is left unspecified (Gloo
  /// reduces through it). The distributed optimizer's reduce-scatter.
  virtual Status ReduceSum(torch::Tensor& t, int root) = 0;
  /// Copies root's `t` to every rank.
  virtual Status Broadcast(torch::Tensor& t, int root) = 0;
  /// Broadcast(t, root) started and left in flight: `t` must stay alive and
  /// untouched until the op's Wait returns. Later calls on this communicator
  /// may be made meanwhile (double buffering). The default runs Broadcast
  /// before returning (an op that is already done); c10d returns at once
  /// (NCCL: queued on its stream; Gloo: run on Gloo's threads).
  virtual Result<std::unique_ptr<PendingOp>> StartBroadcast(torch::Tensor& t, int root);
  /// `t` (1-D, size() equal parts) summed over the group part by part, into
  /// the part's rank: afterwards part rank() of this rank's `t` holds the sum
  /// of every rank's part rank(), the other parts are unspecified. The
  /// reduce-scatter of Megatron's distributed optimizer, in place as NCCL
  /// allows it. The default runs one ReduceSum per part (c10d's Gloo of
  /// LibTorch 1.13 has no reduce-scatter); NCCL overrides it.
  virtual Status ReduceScatterSum(torch::Tensor& t);
  /// `t` (1-D, size() equal parts): part r of every rank's `t` becomes rank
  /// r's part r, the all-gather, in place. The default runs one Broadcast
  /// per part; NCCL overrides it.
  virtual Status AllGather(torch::Tensor& t);
  /// in[r] goes to rank r; out[r] receives rank r's message. Sizes may differ
  /// per pair (expert-parallel token dispatch); out[r] must be allocated to
  /// the size rank r sends (exchange sizes first with AllToAllSizes).
  virtual Status AllToAll(const std::vector<torch::Tensor>& in, std::vector<torch::Tensor>& out) = 0;
  virtual Status Barrier() = 0;

  /// A communicator over `ranks` (group ranks of this communicator, sorted,
  /// including rank()). Every member must call it with the same list; ranks
  /// outside it must not call it.
  virtual Result<std::unique_ptr<Communicator>> Subgroup(const std::vector<int>& ranks) = 0;
};

/// Exchanges the number of rows each rank will send each other rank before
/// an AllToAll: sizes_in[r] rows go to rank r; returns the rows to expect from each.
Result<std::vector<std::int64_t>> AllToAllSizes(Communicator& c, const std::vector<std::int64_t>& sizes_in);

/// Part `r` of `t` as ReduceScatterSum and AllGather cut it (1-D, c.size()
/// equal parts); Internal naming `op` otherwise.
Result<torch::Tensor> PartOf(const Communicator& c, const torch::Tensor& t, int r, const char* op);

/// The default bucket of AllReduceSumBuckets: Megatron-LM's and DDP's 25 MiB.
inline constexpr std::int64_t kGradientBucketBytes = std::int64_t{25} << 20;

/// Sums `tensors` over `c` (null or of one rank: no sum) in place, then
/// divides them by `divisor`, bucket by bucket: consecutive tensors of one
/// dtype flattened into one buffer of at most `bucket_bytes` (a larger tensor
/// alone), so many small tensors cost few collectives and the copy held
/// beside them is one bucket. IoError from the communicator.
Status AllReduceSumBuckets(const std::vector<torch::Tensor>& tensors, Communicator* c, int divisor,
                           std::int64_t bucket_bytes = kGradientBucketBytes);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_COMM_COMMUNICATOR_H_
