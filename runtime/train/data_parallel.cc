#include "runtime/train/data_parallel.h"

#include <set>

#include "runtime/model/model.h"

namespace kp::runtime {

namespace {

// Sums the gradients of `params` over `group` bucket by bucket: consecutive
// gradients of one dtype are flattened into one buffer, so a model of many
// small tensors costs few collectives.
Status AllReduceBuckets(const std::vector<torch::Tensor>& params, Communicator* group, int divisor,
                        std::int64_t bucket_bytes) {
  std::size_t i = 0;
  while (i < params.size()) {
    std::vector<torch::Tensor> bucket;
    std::int64_t bytes = 0;
    const auto dtype = params[i].grad().scalar_type();
    while (i < params.size() && params[i].grad().scalar_type() == dtype &&
           (bucket.empty() || bytes + params[i].grad().nbytes() <= static_cast<std::size_t>(bucket_bytes))) {
      bucket.push_back(params[i].grad());
      bytes += params[i].grad().nbytes();
      ++i;
    }
    std::vector<torch::Tensor> flat;
    for (const torch::Tensor& g : bucket) flat.push_back(g.reshape(-1));
    torch::Tensor buffer = torch::cat(flat);
    if (group != nullptr && group->size() > 1) KP_RETURN_IF_ERROR(group->AllReduceSum(buffer));
    if (divisor != 1) buffer.div_(divisor);
    std::int64_t offset = 0;
    for (torch::Tensor& g : bucket) {
      g.copy_(buffer.narrow(0, offset, g.numel()).view_as(g));
      offset += g.numel();
    }
  }
  return Status::Ok();
}

}  // namespace

SplitParameters SplitByReplication(StageModelImpl& model, const std::vector<torch::Tensor>& trainable) {
  std::set<const void*> banks;
  for (const auto& layer : model.layers()) {
    if (layer->moe() == nullptr) continue;
    for (const torch::Tensor& p : layer->moe()->experts().parameters()) banks.insert(p.unsafeGetTensorImpl());
  }
  SplitParameters s;
  for (const torch::Tensor& p : trainable) {
    const bool expert = banks.count(p.unsafeGetTensorImpl()) > 0;
    (expert ? s.expert : s.dense).push_back(p);
    s.is_expert.push_back(expert);
  }
  return s;
}

Status AverageGradients(const SplitParameters& params, const ReplicaGroups& groups, std::int64_t bucket_bytes) {
  torch::NoGradGuard no_grad;
  for (const auto* list : {&params.dense, &params.expert}) {
    for (const torch::Tensor& p : *list) {
      if (!p.grad().defined()) const_cast<torch::Tensor&>(p).mutable_grad() = torch::zeros_like(p);
    }
  }
  KP_RETURN_IF_ERROR(AllReduceBuckets(params.dense, groups.dp, groups.dp_size, bucket_bytes));
  return AllReduceBuckets(params.expert, groups.expert_dp, groups.dp_size, bucket_bytes);
}

Result<double> ClipGradientNorm(const std::vector<torch::Tensor>& trainable, const SplitParameters& params,
                                const ReplicaGroups& groups, double max_norm) {
  const bool sharded = groups.expert_shards != nullptr && !params.expert.empty();
  if (!sharded) return torch::nn::utils::clip_grad_norm_(trainable, max_norm);
  torch::NoGradGuard no_grad;
  // clip_grad_norm_'s formula, with each expert bank's norm taken over the
  // whole bank: the shards' squared norms summed over EP x ETP in one reduction.
  std::vector<torch::Tensor> squares;
  for (const torch::Tensor& p : params.expert) squares.push_back(p.grad().pow(2).sum());
  torch::Tensor expert_sq = torch::stack(squares);
  KP_RETURN_IF_ERROR(groups.expert_shards->AllReduceSum(expert_sq));
  std::vector<torch::Tensor> norms;
  std::size_t next_expert = 0;
  for (std::size_t i = 0; i < trainable.size(); ++i) {
    norms.push_back(params.is_expert[i] ? expert_sq[next_expert++].sqrt() : trainable[i].grad().norm(2));
  }
  const torch::Tensor total = torch::stack(norms).norm(2);
  const torch::Tensor coef = torch::clamp(max_norm / (total + 1e-6), c10::nullopt, 1.0);
  for (const torch::Tensor& p : trainable) p.grad().mul_(coef);
  return total.item<double>();
}

}  // namespace kp::runtime
