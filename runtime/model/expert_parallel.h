// Expert parallelism: the routed experts of every MoE layer split evenly
// over an expert-parallel (EP) group, tokens sent to the rank that holds
// their expert by an all-to-all and the outputs sent back by another. The
// exchange is differentiable: its backward is the reverse all-to-all.
//
// Order: a rank runs expert e on the rows from EP rank 0, then rank 1, ...,
// each in its own routing order, which is the order a single process would
// use on the EP ranks' batches concatenated in rank order; so an EP run
// feeds every expert exactly the rows, in exactly the order, of that
// single-process reference.
// Thread-safety: as the model (one thread).
#ifndef KIMI_PLAN_RUNTIME_MODEL_EXPERT_PARALLEL_H_
#define KIMI_PLAN_RUNTIME_MODEL_EXPERT_PARALLEL_H_

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/status.h"
#include "runtime/comm/communicator.h"

namespace kp::runtime {

class ExpertBankImpl;
class StageModelImpl;

/// What a failed exchange inside forward or backward throws (autograd gives
/// no other way out); the trainer turns it back into an IoError Status.
class CommunicationError : public std::runtime_error {
 public:
  explicit CommunicationError(const Status& s) : std::runtime_error(s.message()) {}
};

/// A communicator as an integer, the form an autograd node's saved_data can
/// hold (IValues only); the caller keeps the communicator alive through the
/// backward.
inline std::int64_t CommunicatorHandle(Communicator& c) { return reinterpret_cast<std::int64_t>(&c); }
inline Communicator& CommunicatorOf(std::int64_t handle) { return *reinterpret_cast<Communicator*>(handle); }

/// Sends rows [offset_j, offset_j + send_rows[j]) of `x` to EP rank j and
/// returns the rows received, rank 0's first (recv_rows[j] from rank j).
/// Differentiable in `x`. Throws CommunicationError.
torch::Tensor ExchangeRows(Communicator& ep, const torch::Tensor& x, const std::vector<std::int64_t>& send_rows,
                           const std::vector<std::int64_t>& recv_rows);

/// The routed experts over the EP group: `x_sorted` [M, D] holds this rank's
/// (token, slot) rows grouped by global expert, counts[e] rows for expert e
/// (counts has every expert of the layer); `bank` holds this rank's
/// E / ep.size() experts, ep.rank() * E / ep.size() onwards. Returns [M, D],
/// the experts' outputs in x_sorted's order. Collective over `ep`.
torch::Tensor RunExpertsParallel(Communicator& ep, ExpertBankImpl& bank, const torch::Tensor& x_sorted,
                                 const std::vector<std::int64_t>& counts);

/// Keeps only this EP rank's experts in every MoE layer of `model` and routes
/// through `ep` from now on (call before the optimizer is built). The kept
/// experts have exactly the whole model's initial weights. InvalidArgument
/// naming --ep when the experts do not split evenly or LoRA is on.
Status ShardExperts(StageModelImpl& model, Communicator* ep);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_MODEL_EXPERT_PARALLEL_H_
