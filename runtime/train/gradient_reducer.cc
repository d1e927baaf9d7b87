#include "runtime/train/gradient_reducer.h"

#include <cmath>
#include <set>

#include "runtime/model/tensor_parallel.h"

namespace kp::runtime {

Status GradientReducer::Collect(const PipelineContext& ctx) {
  params_.clear(), expert_at_.clear(), tp_shard_at_.clear(), slots_.clear();
  split_ = SplitParameters{};
  for (const auto& [s, module] : ctx.modules) {
    StageModelImpl* model = ModelOfStage(*module);
    const std::vector<torch::Tensor> mine = module->TrainableParameters();
    const SplitParameters part = model != nullptr ? SplitByReplication(*model, mine)
                                                  : SplitParameters{mine, {}, std::vector<bool>(mine.size(), false)};
    std::set<const c10::TensorImpl*> tp_shards;
    if (auto it = ctx.tp_splits.find(s); it != ctx.tp_splits.end()) {
      const auto named = model->named_parameters();
      for (const auto& [name, shard] : it->second.shards) tp_shards.insert(named[name].unsafeGetTensorImpl());
    }
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const int at = static_cast<int>(params_.size());
      if (part.is_expert[i] && ctx.config.replicas.expert_shards != nullptr) expert_at_.push_back(at);
      if (tp_shards.count(mine[i].unsafeGetTensorImpl()) > 0) tp_shard_at_.push_back(at);
      params_.push_back(mine[i]);
    }
    split_.dense.insert(split_.dense.end(), part.dense.begin(), part.dense.end());
    split_.expert.insert(split_.expert.end(), part.expert.begin(), part.expert.end());
    split_.is_expert.insert(split_.is_expert.end(), part.is_expert.begin(), part.is_expert.end());
  }
  return ExchangeLayout(ctx);
}

Status GradientReducer::ExchangeLayout(const PipelineContext& ctx) {
  const int stages = ctx.schedule.num_stages;
  torch::Tensor host = torch::zeros({stages}, torch::kDouble);
  for (const auto& [s, module] : ctx.modules) host[s] = static_cast<double>(module->TrainableParameters().size());
  torch::Tensor counts = host.to(ctx.device);
  KP_RETURN_IF_ERROR(ctx.comm->AllReduceSum(counts));
  counts = counts.cpu();
  std::vector<int> offset(stages + 1, 0);
  for (int s = 0; s < stages; ++s) offset[s + 1] = offset[s] + static_cast<int>(counts[s].item<double>());
  global_params_ = offset.back();
  for (const auto& [s, module] : ctx.modules) {
    const int n = static_cast<int>(module->TrainableParameters().size());
    for (int j = 0; j < n; ++j) slots_.push_back(offset[s] + j);
  }
  return Status::Ok();
}

Status GradientReducer::Reduce(const PipelineContext& ctx, ParameterShards* shards) {
  for (const auto& [s, tp_split] : ctx.tp_splits)
    KP_RETURN_IF_ERROR(ReduceTensorParallelGradients(*ctx.config.replicas.tp, *ModelOfStage(*ctx.modules.at(s)),
                                                     tp_split, ctx.config.replicas.sequence_parallel));
  if (ctx.DenseSize() == 1 && ctx.config.replicas.expert_dp == nullptr) return Status::Ok();
  if (shards != nullptr && shards->sharded()) return shards->ReduceScatterGradients(ctx.Replicas().dp_size);
  return AverageGradients(split_, ctx.Replicas());
}

// Each parameter's squared gradient norm. Reduce-scattered gradients are
// whole only in their owners' parts: a parameter's square is the sum of its
// owned parts' over the replica group (group 0 of the shards holds the
// dense parameters, group 1 the experts', in `params_` order).
Result<std::vector<double>> GradientReducer::Squares(const PipelineContext& ctx,
                                                     const ParameterShards* shards) const {
  if (shards == nullptr || !shards->sharded()) return GradSquares(params_);
  const std::vector<torch::Tensor> by_group[2] = {shards->OwnedGradients(0), shards->OwnedGradients(1)};
  std::vector<torch::Tensor> owned;
  std::vector<int> dense_at, expert_at_all;
  std::size_t index[2] = {0, 0};
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const int g = split_.is_expert[i] ? 1 : 0;
    (g == 1 ? expert_at_all : dense_at).push_back(static_cast<int>(i));
    owned.push_back(by_group[g][index[g]++]);
  }
  std::vector<double> squares = SquaredNorms(owned);
  const ReplicaGroups replicas = ctx.Replicas();
  KP_RETURN_IF_ERROR(SumSquaresOver(ctx, replicas.dp, dense_at, squares));
  KP_RETURN_IF_ERROR(SumSquaresOver(ctx, replicas.expert_dp, expert_at_all, squares));
  return squares;
}

// The squares at `at` summed over `group` in place (a parameter split over
// it: each rank holds a part of the whole's square).
Status GradientReducer::SumSquaresOver(const PipelineContext& ctx, Communicator* group, const std::vector<int>& at,
                                       std::vector<double>& squares) const {
  if (group == nullptr || at.empty()) return Status::Ok();
  torch::Tensor host = torch::zeros({static_cast<std::int64_t>(at.size())}, torch::kDouble);
  for (std::size_t i = 0; i < at.size(); ++i) host[i] = squares[at[i]];
  torch::Tensor summed = host.to(ctx.device);
  KP_RETURN_IF_ERROR(group->AllReduceSum(summed));
  summed = summed.cpu();
  for (std::size_t i = 0; i < at.size(); ++i) squares[at[i]] = summed[i].item<double>();
  return Status::Ok();
}

// Each parameter's square lands in its own slot of the whole model's order
// (one rank contributes to a slot, so the all-reduce is exact) and the sum
// runs over the slots in order: SumInOrder over the single model.
// A sharded expert bank's square is first summed over its EP group, a TP
// shard's over its TP group. The TP ranks of a stage hold the same slots
// and add the same squares: the pipeline group has one rank per stage.
Result<double> GradientReducer::GradNorm(const PipelineContext& ctx, const ParameterShards* shards) const {
  KP_ASSIGN_OR_RETURN(std::vector<double> mine, Squares(ctx, shards));
  KP_RETURN_IF_ERROR(SumSquaresOver(ctx, ctx.config.replicas.expert_shards, expert_at_, mine));
  KP_RETURN_IF_ERROR(SumSquaresOver(ctx, ctx.config.replicas.tp, tp_shard_at_, mine));
  torch::Tensor host = torch::zeros({global_params_}, torch::kDouble);
  for (std::size_t i = 0; i < mine.size(); ++i) host[slots_[i]] = mine[i];
  torch::Tensor squares = host.to(ctx.device);
  KP_RETURN_IF_ERROR(ctx.comm->AllReduceSum(squares));
  const torch::Tensor flat = squares.cpu().contiguous();
  const double* d = flat.data_ptr<double>();
  return std::sqrt(SumInOrder(std::vector<double>(d, d + global_params_)));
}

// Only the last stage's rank has the losses; the others add zeros, which
// is exact, and everyone sums the micro-batches in order; then the
// replicas' means are averaged over DP (in DP-rank order in-process).
Result<double> GradientReducer::Loss(const PipelineContext& ctx, const torch::Tensor& losses, bool own_loss) const {
  const int M = ctx.M();
  torch::Tensor l = losses.clone();  // zeros off the last stage: the executor wrote none
  KP_RETURN_IF_ERROR(ctx.comm->AllReduceSum(l));
  l = l.cpu();
  double sum = 0;
  for (int m = 0; m < M; ++m) sum += l[m].item<double>();
  const double mine = own_loss ? sum : sum / M;
  if (ctx.DenseSize() == 1) return mine;
  torch::Tensor replica = torch::full({1}, mine, ctx.OnDevice(torch::kDouble));
  KP_RETURN_IF_ERROR(ctx.DenseReplicas()->AllReduceSum(replica));
  return replica.item<double>() / ctx.DenseSize();
}

}  // namespace kp::runtime
