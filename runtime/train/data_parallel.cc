#include "runtime/train/data_parallel.h"

#include <set>

#include "runtime/model/model.h"

namespace kp::runtime {

namespace {

std::vector<torch::Tensor> GradientsOf(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& p : params) grads.push_back(p.grad());
  return grads;
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
  KP_RETURN_IF_ERROR(AllReduceSumBuckets(GradientsOf(params.dense), groups.dp, groups.dp_size, bucket_bytes));
  return AllReduceSumBuckets(GradientsOf(params.expert), groups.expert_dp, groups.dp_size, bucket_bytes);
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
