// Expert parallelism: the routed experts of every MoE layer split evenly
// over an expert-parallel (EP) group, tokens sent to the rank that holds
// their expert by an all-to-all and the outputs sent back by another. The
// exchange is differentiable: its backward is the reverse all-to-all.
//
// Expert tensor parallelism (ETP) splits each expert's FFN over an ETP group
// as well: the ETP ranks hold the same experts, each a slice of every
// expert's hidden units. After the EP all-to-all each ETP rank's received
// rows are gathered by the whole ETP group, every rank runs its slice on all
// of them, and the partial sums go back to the rank that brought the rows
// (a reduce-scatter, added in ETP rank order), then back over EP (Megatron's
// all-to-all dispatcher with expert TP).
//
// Order: a rank runs expert e on the rows from source 0, then source 1, ...,
// each in its own routing order, the sources being the ranks of its ep x etp
// block in the block's order (rank_groups.h: source j * etp + t is EP rank
// j, ETP rank t); that is the order a single process would use on the
// block's batches concatenated in rank order, so an EP run feeds every
// expert exactly the rows, in exactly the order, of that single-process
// reference (and with ETP, every shard of it).
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

/// A communicator as an integer, the form an autograd node's saved_data can
/// hold (IValues only); the caller keeps the communicator alive through the
/// backward.
inline std::int64_t CommunicatorHandle(Communicator& c) { return reinterpret_cast<std::int64_t>(&c); }
inline Communicator& CommunicatorOf(std::int64_t handle) { return *reinterpret_cast<Communicator*>(handle); }

/// The groups a MoE layer's routed experts are split over; null: a group of
/// one. Neither is owned.
struct ExpertGroups {
  Communicator* ep = nullptr;   ///< the experts split (token all-to-all)
  Communicator* etp = nullptr;  ///< each expert's FFN split (rows gathered, partial sums reduce-scattered)
  bool split() const { return ep != nullptr || etp != nullptr; }
};

/// Sends rows [offset_j, offset_j + send_rows[j]) of `x` to EP rank j and
/// returns the rows received, rank 0's first (recv_rows[j] from rank j).
/// Differentiable in `x`. Throws CommunicationError.
torch::Tensor ExchangeRows(Communicator& ep, const torch::Tensor& x, const std::vector<std::int64_t>& send_rows,
                           const std::vector<std::int64_t>& recv_rows);

/// The routed experts over the expert groups: `x_sorted` [M, D] holds this
/// rank's (token, slot) rows grouped by global expert, counts[e] rows for
/// expert e (counts has every expert of the layer); `bank` holds this EP
/// rank's E / ep experts, ep rank * E / ep onwards, with this ETP rank's
/// slice of their FFN. Returns [M, D], the experts' outputs in x_sorted's
/// order. Collective over both groups.
torch::Tensor RunExpertsParallel(const ExpertGroups& groups, ExpertBankImpl& bank, const torch::Tensor& x_sorted,
                                 const std::vector<std::int64_t>& counts);

/// Keeps only this rank's expert shards in every MoE layer of `model` (the
/// EP rank's experts, the ETP rank's FFN slice) and routes through `groups`
/// from now on (call before the optimizer is built). The kept shards have
/// exactly the whole model's initial weights. InvalidArgument naming --ep or
/// --etp when the experts or their FFN do not split evenly or LoRA is on.
Status ShardExperts(StageModelImpl& model, const ExpertGroups& groups);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_MODEL_EXPERT_PARALLEL_H_
