// The pipeline rank's set-up, step and reductions; the actions that move
// the payload are in pipeline_actions.cc.
#include "runtime/train/pipeline_runtime.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "common/clock.h"
#include "runtime/comm/device.h"
#include "runtime/comm/rank_groups.h"
#include "runtime/model/expert_parallel.h"
#include "runtime/train/pipeline_rank_internal.h"
#include "runtime/train/trainer_internal.h"
#include "schedules/schedule_generators.h"

namespace kp::runtime {

PipelineReplicas ReplicasOf(const RankGroups& g, bool sequence_parallel) {
  PipelineReplicas r;
  r.dp = g.dp != nullptr && g.dp->size() > 1 ? g.dp : nullptr;
  r.expert_dp = g.expert_dp;
  r.ep = g.ep;
  r.etp = g.etp;
  r.expert_shards = g.expert_shards;
  r.tp = g.tp;
  r.sequence_parallel = sequence_parallel;
  r.cp = g.cp;
  r.dp_cp = g.dp_cp;
  return r;
}

using namespace pipeline_internal;

// ---------------------------------------------------------------- setup

namespace {

Status ValidateConfig(const PipelineRankConfig& c, const Communicator& comm) {
  if (c.pp < 1 || comm.size() != c.pp)
    return Status::InvalidArgument("--pp: " + std::to_string(c.pp) + " does not match the pipeline group's " +
                                   std::to_string(comm.size()) + " ranks");
  const int dp = c.replicas.dp != nullptr ? c.replicas.dp->size() : 1;
  if (c.train.batch % dp != 0)
    return Status::InvalidArgument("--batch: " + std::to_string(c.train.batch) + " sequences do not split evenly over dp " +
                                   std::to_string(dp));
  const int rows = c.train.batch / dp;
  if (c.microbatches < 1 || rows % c.microbatches != 0)
    return Status::InvalidArgument("--microbatches: " + std::to_string(c.microbatches) + " must be positive and divide " +
                                   "the " + std::to_string(rows) + " sequences of a replica (--batch " +
                                   std::to_string(c.train.batch) + " over dp " + std::to_string(dp) + ")");
  if (c.replicas.tp != nullptr && c.replicas.tp->size() > 1 && c.train.lora.enabled())
    return Status::InvalidArgument("--tp: tensor parallelism with LoRA adapters is not supported yet");
  for (const auto& [group, flag] : {std::pair{c.replicas.ep, "--ep"}, std::pair{c.replicas.etp, "--etp"}})
    if (group != nullptr && group->size() > 1 && c.train.lora.enabled())
      return Status::InvalidArgument(std::string(flag) + ": splitting experts with LoRA adapters is not supported yet");
  return ValidateTrainConfig(c.train);
}

bool HasBf16(const std::vector<torch::Tensor>& params) {
  return std::any_of(params.begin(), params.end(),
                     [](const torch::Tensor& p) { return p.scalar_type() == torch::kBFloat16; });
}

}  // namespace

Status PipelineRank::Impl::Setup(StageModuleFactory factory) {
  KP_RETURN_IF_ERROR(ValidateConfig(config, *comm));
  KP_RETURN_IF_ERROR(ValidateForRuntime(config.train.model));
  config.train.options.seed = config.train.seed;
  KP_ASSIGN_OR_RETURN(device, ParseDevice(config.train.device));
  if (config.replicas.dp != nullptr) dp_rank = config.replicas.dp->rank(), dp_size = config.replicas.dp->size();
  const int vp = ScheduleTakesVp(config.schedule) ? config.vp : 1;
  KP_ASSIGN_OR_RETURN(PipelineSchedule compute, GenerateSchedule(config.schedule, config.pp, vp, M()));
  KP_ASSIGN_OR_RETURN(schedule, AddCommunication(compute));
  if (config.split.stages.empty()) {
    KP_ASSIGN_OR_RETURN(config.split, EvenSplit(config.train.model.layers, schedule.num_stages));
  }
  if (config.split.num_stages() != schedule.num_stages)
    return Status::InvalidArgument("--split: " + std::to_string(config.split.num_stages()) + " stages, the " +
                                   ScheduleName(config.schedule) + " schedule has " +
                                   std::to_string(schedule.num_stages));
  // The split's ends are the embedding and the head, whatever the counts say.
  config.split.stages.front().embedding = true;
  config.split.stages.back().head = true;
  KP_ASSIGN_OR_RETURN(routes, Routes(config, schedule));
  if (!factory)
    factory = [this](int, const StageLayers& layers) {
      // Sharded construction: PlaceStages cuts this rank's shards from the
      // deferred weights before any is made.
      ModelOptions options = config.train.options;
      options.deferred_init = true;
      return MakeModelStage(config.train.model, options, layers);
    };
  for (int s = 0; s < schedule.num_stages; ++s) {
    if (RankOf(s) != rank()) continue;
    KP_ASSIGN_OR_RETURN(modules[s], factory(s, config.split.stages[s]));
  }
  if (modules.empty()) return Status::InvalidArgument("--schedule: rank " + std::to_string(rank()) + " holds no stage");
  act_dtype = config.train.options.dtype == DType::kBf16 ? torch::kBFloat16 : torch::kFloat;
  KP_RETURN_IF_ERROR(PlaceStages());
  CollectParameters();
  KP_RETURN_IF_ERROR(ExchangeParameterLayout());
  MakeOptimizer();
  return Status::Ok();
}

// AdamW over the whole parameters, or with the distributed optimizer over
// this rank's shards of them (the dense ones over their DP (x CP) replicas,
// the experts' over expert-DP). bf16 parameters (Megatron's mixed
// precision) always go through the shards, which keep their fp32 masters;
// without the distributed optimizer each rank owns all of them.
void PipelineRank::Impl::MakeOptimizer() {
  shards.reset();
  if (!config.train.distributed_optimizer && !HasBf16(params)) {
    optimizer = std::make_unique<MultiTensorAdamW>(ParamGroups(params, config.train),
                                                   torch::optim::AdamWOptions(config.train.lr));
    return;
  }
  const ReplicaGroups replicas = Replicas();
  const bool sharded = config.train.distributed_optimizer;
  shards = std::make_unique<ParameterShards>(std::vector<ReplicatedParameters>{
      {split.dense, sharded ? replicas.dp : nullptr}, {split.expert, sharded ? replicas.expert_dp : nullptr}});
  std::vector<torch::Tensor> decay, no_decay;
  for (const ParameterShards::Slice& s : shards->slices()) (s.matrix ? decay : no_decay).push_back(s.values);
  optimizer = std::make_unique<MultiTensorAdamW>(ParamGroups(decay, no_decay, config.train),
                                                 torch::optim::AdamWOptions(config.train.lr));
}

// LoRA adapters on every stage, initialised by name so that every split gets
// the single-process model's; a stand-in stage cannot take them.
Status PipelineRank::Impl::EnableLora(const LoraOptions& lora, std::uint64_t seed) {
  for (auto& [s, module] : modules)
    if (ModelOfStage(*module) == nullptr)
      return Status::InvalidArgument("--lora-rank: stage " + std::to_string(s) + " is a stand-in");
  for (auto& [s, module] : modules) {
    StageModelImpl* model = ModelOfStage(*module);
    model->EnableLora(lora, seed);
    model->to(device);
  }
  return Status::Ok();
}

// Each model stage's experts sharded over EP and ETP, the stage split over
// TP (while its weights are still deferred, so only this rank's shards are
// ever made), its mixers put on the CP group, its weights made, then the
// adapters a run starts with (never with a split: ValidateConfig), and the
// stage moved to the device.
Status PipelineRank::Impl::PlaceStages() {
  for (auto& [s, module] : modules) {
    StageModelImpl* model = ModelOfStage(*module);
    if (model == nullptr) {
      if (TensorParallel()) return Status::InvalidArgument("--tp: stage " + std::to_string(s) + " is a stand-in");
      continue;
    }
    KP_RETURN_IF_ERROR(ShardExperts(*model, ExpertGroups{config.replicas.ep, config.replicas.etp}));
    if (TensorParallel()) {
      KP_ASSIGN_OR_RETURN(tp_splits[s], ShardTensorParallel(*model, *config.replicas.tp,
                                                            config.replicas.sequence_parallel, config.train.seq_len / CpSize()));
    }
    if (ContextParallel()) model->SetContextParallel(ContextShard(config.replicas.cp));
    KP_RETURN_IF_ERROR(model->Materialize());
  }
  if (config.train.lora.enabled()) KP_RETURN_IF_ERROR(EnableLora(config.train.lora, config.train.seed));
  for (auto& [s, module] : modules)
    if (StageModelImpl* model = ModelOfStage(*module)) model->to(device);
  return Status::Ok();
}

// The rank's trainable parameters (stage order), split into dense and
// expert ones for the DP average, with the EP and TP shards marked for the
// gradient norm.
void PipelineRank::Impl::CollectParameters() {
  params.clear(), expert_at.clear(), tp_shard_at.clear(), slots.clear();
  split = SplitParameters{};
  for (auto& [s, module] : modules) {
    StageModelImpl* model = ModelOfStage(*module);
    const std::vector<torch::Tensor> mine = module->TrainableParameters();
    const SplitParameters part = model != nullptr ? SplitByReplication(*model, mine)
                                                  : SplitParameters{mine, {}, std::vector<bool>(mine.size(), false)};
    std::set<const c10::TensorImpl*> tp_shards;
    if (auto it = tp_splits.find(s); it != tp_splits.end()) {
      const auto named = model->named_parameters();
      for (const auto& [name, shard] : it->second.shards) tp_shards.insert(named[name].unsafeGetTensorImpl());
    }
    for (std::size_t i = 0; i < mine.size(); ++i) {
      if (part.is_expert[i] && config.replicas.expert_shards != nullptr) expert_at.push_back(static_cast<int>(params.size()));
      if (tp_shards.count(mine[i].unsafeGetTensorImpl()) > 0) tp_shard_at.push_back(static_cast<int>(params.size()));
      params.push_back(mine[i]);
    }
    split.dense.insert(split.dense.end(), part.dense.begin(), part.dense.end());
    split.expert.insert(split.expert.end(), part.expert.begin(), part.expert.end());
    split.is_expert.insert(split.is_expert.end(), part.is_expert.begin(), part.is_expert.end());
  }
}

// LoRA goes on after a full-weight warm start, as TrainSession's would on a
// loaded checkpoint: the adapters are initialised by name, so every split
// gets the single-process model's.
Status PipelineRank::Impl::BeginPhase(const TrainConfig& next) {
  TrainConfig t = next;
  t.model = config.train.model;
  t.options = config.train.options;
  t.device = config.train.device;
  t.seed = config.train.seed;
  t.deterministic = config.train.deterministic;
  PipelineRankConfig c = config;
  c.train = t;
  KP_RETURN_IF_ERROR(ValidateConfig(c, *comm));
  const bool add_lora = t.lora.enabled() && !config.train.lora.enabled();
  if (!t.lora.enabled() && config.train.lora.enabled())
    return Status::InvalidArgument("--lora-rank: a phase cannot drop the LoRA adapters the last one trained");
  if (add_lora) KP_RETURN_IF_ERROR(EnableLora(t.lora, t.seed));
  // The last phase's gradients go: a frozen base would keep them resident.
  for (const torch::Tensor& p : params) p.mutable_grad() = torch::Tensor();
  config.train = t;
  CollectParameters();
  KP_RETURN_IF_ERROR(ExchangeParameterLayout());
  MakeOptimizer();
  step = 0;
  return Status::Ok();
}

// Every rank learns how many parameters each stage has, so a parameter's
// place in the whole model's order (stage major) is known everywhere and the
// gradient norm can be summed in that order.
Status PipelineRank::Impl::ExchangeParameterLayout() {
  torch::Tensor host = torch::zeros({schedule.num_stages}, torch::kDouble);
  for (auto& [s, module] : modules) host[s] = static_cast<double>(module->TrainableParameters().size());
  torch::Tensor counts = host.to(device);
  KP_RETURN_IF_ERROR(comm->AllReduceSum(counts));
  counts = counts.cpu();
  std::vector<int> offset(schedule.num_stages + 1, 0);
  for (int s = 0; s < schedule.num_stages; ++s) offset[s + 1] = offset[s] + static_cast<int>(counts[s].item<double>());
  global_params = offset.back();
  for (auto& [s, module] : modules) {
    const int n = static_cast<int>(module->TrainableParameters().size());
    for (int j = 0; j < n; ++j) slots.push_back(offset[s] + j);
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- step

Status PipelineRank::Impl::CheckDrained() const {
  if (!saved.empty() || !fwd_inbox.empty() || !bwd_inbox.empty() || !fwd_outbox.empty() || !bwd_outbox.empty() ||
      !store.empty())
    return Status::Internal("pipeline rank " + std::to_string(rank()) +
                            ": the schedule left activations, messages or stored blocks behind");
  return Status::Ok();
}

void PipelineRank::Impl::ResetStep() {
  saved.clear(), fwd_inbox.clear(), bwd_inbox.clear(), fwd_outbox.clear(), bwd_outbox.clear();
  store.Clear();
  traffic.clear();
  losses.assign(M(), 0.0);
}

Status PipelineRank::Impl::SetTokens(const std::vector<std::int64_t>& t) {
  const std::int64_t want = std::int64_t(config.train.batch) * (Tokens() + 1);
  if (static_cast<std::int64_t>(t.size()) != want)
    return Status::InvalidArgument("tokens: " + std::to_string(t.size()) + " given, --batch x (--seq-len + 1) is " +
                                   std::to_string(want));
  tokens = torch::tensor(t, torch::kLong)
               .reshape({config.train.batch, Tokens() + 1})
               .narrow(0, dp_rank * ReplicaRows(), ReplicaRows())
               .to(device);
  return Status::Ok();
}

// Only the last stage's rank has the losses; the others add zeros, which
// is exact, and everyone sums the micro-batches in order; then the
// replicas' means are averaged over DP (in DP-rank order in-process).
Result<double> PipelineRank::Impl::ReduceLoss() {
  torch::Tensor host = torch::zeros({M()}, torch::kDouble);
  if (RankOf(schedule.num_stages - 1) == rank())
    for (int m = 0; m < M(); ++m) host[m] = losses[m];
  torch::Tensor l = host.to(device);
  KP_RETURN_IF_ERROR(comm->AllReduceSum(l));
  l = l.cpu();
  double sum = 0;
  for (int m = 0; m < M(); ++m) sum += l[m].item<double>();
  const double mine = step_loss != nullptr ? sum : sum / M();
  if (DenseSize() == 1) return mine;
  torch::Tensor replica = torch::full({1}, mine, OnDevice(torch::kDouble));
  KP_RETURN_IF_ERROR(DenseReplicas()->AllReduceSum(replica));
  return replica.item<double>() / DenseSize();
}

// The partial gradients of the TP split (tensor_parallel.h) summed over TP.
Status PipelineRank::Impl::ReduceOverTensorParallel() {
  for (auto& [s, tp_split] : tp_splits)
    KP_RETURN_IF_ERROR(ReduceTensorParallelGradients(*config.replicas.tp, *ModelOfStage(*modules.at(s)), tp_split,
                                                     config.replicas.sequence_parallel));
  return Status::Ok();
}

// The replicas' gradients averaged (the dense ones over DP, the experts'
// over expert-DP); every parameter has a gradient afterwards. With the
// distributed optimizer each rank gets the average of its owned parts alone.
Status PipelineRank::Impl::AverageOverReplicas() {
  if (DenseSize() == 1 && config.replicas.expert_dp == nullptr) return Status::Ok();
  if (shards && shards->sharded()) return shards->ReduceScatterGradients(Replicas().dp_size);
  return AverageGradients(split, Replicas());
}

// Each parameter's squared gradient norm. Reduce-scattered gradients are
// whole only in their owners' parts: a parameter's square is the sum of its
// owned parts' over the replica group (group 0 of the shards holds the
// dense parameters, group 1 the experts', in `params` order).
Result<std::vector<double>> PipelineRank::Impl::GradientSquares() const {
  if (!shards || !shards->sharded()) return GradSquares(params);
  const std::vector<torch::Tensor> by_group[2] = {shards->OwnedGradients(0), shards->OwnedGradients(1)};
  std::vector<torch::Tensor> owned;
  std::vector<int> dense_at, expert_at_all;
  std::size_t index[2] = {0, 0};
  for (std::size_t i = 0; i < params.size(); ++i) {
    const int g = split.is_expert[i] ? 1 : 0;
    (g == 1 ? expert_at_all : dense_at).push_back(static_cast<int>(i));
    owned.push_back(by_group[g][index[g]++]);
  }
  std::vector<double> squares = SquaredNorms(owned);
  const ReplicaGroups replicas = Replicas();
  KP_RETURN_IF_ERROR(SumSquaresOver(replicas.dp, dense_at, squares));
  KP_RETURN_IF_ERROR(SumSquaresOver(replicas.expert_dp, expert_at_all, squares));
  return squares;
}

// The squares at `at` summed over `group` in place (a parameter split over
// it: each rank holds a part of the whole's square).
Status PipelineRank::Impl::SumSquaresOver(Communicator* group, const std::vector<int>& at,
                                          std::vector<double>& squares) const {
  if (group == nullptr || at.empty()) return Status::Ok();
  torch::Tensor host = torch::zeros({static_cast<std::int64_t>(at.size())}, torch::kDouble);
  for (std::size_t i = 0; i < at.size(); ++i) host[i] = squares[at[i]];
  torch::Tensor summed = host.to(device);
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
Result<double> PipelineRank::Impl::ReduceGradNorm() {
  KP_ASSIGN_OR_RETURN(std::vector<double> mine, GradientSquares());
  KP_RETURN_IF_ERROR(SumSquaresOver(config.replicas.expert_shards, expert_at, mine));
  KP_RETURN_IF_ERROR(SumSquaresOver(config.replicas.tp, tp_shard_at, mine));
  torch::Tensor host = torch::zeros({global_params}, torch::kDouble);
  for (std::size_t i = 0; i < mine.size(); ++i) host[slots[i]] = mine[i];
  torch::Tensor squares = host.to(device);
  KP_RETURN_IF_ERROR(comm->AllReduceSum(squares));
  const torch::Tensor flat = squares.cpu().contiguous();
  const double* d = flat.data_ptr<double>();
  return std::sqrt(SumInOrder(std::vector<double>(d, d + global_params)));
}

Result<PipelineStepResult> PipelineRank::Impl::TrainStep(const std::vector<std::int64_t>& t, int T,
                                                        MicroBatchLoss* loss) {
  Stopwatch watch;
  if (T < 1) return Status::InvalidArgument("seq_len: a step's rows need at least one token, got " + std::to_string(T));
  if (TensorParallel() && loss != nullptr)
    return Status::InvalidArgument("--tp: a step's own loss (SDPO) with tensor parallelism is not supported yet");
  if (ContextParallel()) KP_RETURN_IF_ERROR(CheckContextSplit(CpSize(), T, KdaConvReach(config.train.model)));
  if (SequenceParallel() && T / CpSize() % config.replicas.tp->size() != 0)
    return Status::InvalidArgument("--sequence-parallel: --tp " + std::to_string(config.replicas.tp->size()) +
                                   " does not divide the step's sequence length " + std::to_string(T) +
                                   (ContextParallel() ? " over cp " + std::to_string(CpSize()) : ""));
  seq_len = T;
  step_loss = loss;
  KP_RETURN_IF_ERROR(SetTokens(t));
  ResetStep();
  PipelineStepResult r;
  r.lr = LearningRate(config.train, step);
  for (auto& group : optimizer->param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(r.lr);
  // The gradients stay allocated from step to step and are zeroed, as
  // Megatron's gradient buffer is (and as the plan prices them), whichever
  // LibTorch's zero_grad would free them. With the shards every gradient is
  // a view of its group's contiguous buffer, in place before the backward,
  // which accumulates into it: a bf16 parameter's is its fp32 main gradient
  // (Megatron's main_grad), and the buckets are reduce-scattered in place.
  if (shards) {
    shards->PrepareGradients();
  } else {
    torch::NoGradGuard no_grad;
    for (const torch::Tensor& p : params)
      if (p.grad().defined()) p.mutable_grad().zero_();
  }
  KP_RETURN_IF_ERROR(RunActions(/*training=*/true));
  KP_RETURN_IF_ERROR(CheckDrained());
  KP_RETURN_IF_ERROR(ReduceOverTensorParallel());
  KP_RETURN_IF_ERROR(AverageOverReplicas());
  KP_ASSIGN_OR_RETURN(r.grad_norm, ReduceGradNorm());
  KP_ASSIGN_OR_RETURN(r.loss, ReduceLoss());
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm))
    return Status::Internal("step " + std::to_string(step + 1) + ": the loss or the gradient became non-finite (loss " +
                            std::to_string(r.loss) + ", grad norm " + std::to_string(r.grad_norm) + "); lower --lr");
  // Clipping is folded into the update: one pass over the gradients fewer.
  optimizer->ScaleGradientsInNextStep(ClipScale(r.grad_norm, config.train.grad_clip));
  if (shards) shards->BindGradients();
  optimizer->step();
  if (shards) {
    shards->StoreMasters();
    shards->ReleaseGradients();
    KP_RETURN_IF_ERROR(shards->Gather());
  }
  for (auto& [s, module] : modules) {
    if (StageModelImpl* model = ModelOfStage(*module)) KP_RETURN_IF_ERROR(SumRouterLoads(*model, DenseReplicas()));
    module->AfterStep(config.train.bias_update_rate);
  }
  r.step = ++step;
  for (const auto& [key, traffic_row] : traffic) r.traffic.push_back(traffic_row);
  r.step_seconds = watch.Seconds();
  return r;
}

Result<double> PipelineRank::Impl::EvalStep(const std::vector<std::int64_t>& t) {
  seq_len = config.train.seq_len;
  step_loss = nullptr;
  KP_RETURN_IF_ERROR(SetTokens(t));
  ResetStep();
  {
    torch::NoGradGuard no_grad;
    KP_RETURN_IF_ERROR(RunActions(/*training=*/false));
  }
  KP_RETURN_IF_ERROR(CheckDrained());
  return ReduceLoss();
}

// ---------------------------------------------------------------- public

PipelineRank::PipelineRank(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PipelineRank::~PipelineRank() = default;

Result<std::unique_ptr<PipelineRank>> PipelineRank::Create(const PipelineRankConfig& config, Communicator& pp,
                                                           StageModuleFactory factory) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->comm = &pp;
  try {
    if (config.train.deterministic) UseDeterministicAlgorithms();
    KP_RETURN_IF_ERROR(impl->Setup(std::move(factory)));
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("setting up the pipeline rank: ") + e.what_without_backtrace());
  }
  return std::unique_ptr<PipelineRank>(new PipelineRank(std::move(impl)));
}

Result<PipelineStepResult> PipelineRank::TrainStep(const std::vector<std::int64_t>& tokens) {
  return TrainStepWith(tokens, impl_->config.train.seq_len, nullptr);
}

Result<PipelineStepResult> PipelineRank::TrainStep(const std::vector<std::int64_t>& tokens, int seq_len,
                                                   MicroBatchLoss& loss) {
  return TrainStepWith(tokens, seq_len, &loss);
}

Status PipelineRank::BeginPhase(const TrainConfig& train) {
  try {
    return impl_->BeginPhase(train);
  } catch (const CommunicationError& e) {
    return Status::IoError(std::string("starting a training phase: ") + e.what());
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("starting a training phase: ") + e.what_without_backtrace());
  }
}

Result<PipelineStepResult> PipelineRank::TrainStepWith(const std::vector<std::int64_t>& tokens, int seq_len,
                                                       MicroBatchLoss* loss) {
  // A loss's shares are indexed by the micro-batch alone (pipeline_stage.h):
  // a replica's rows would need their offset in the batch too.
  if (loss != nullptr && impl_->dp_size > 1)
    return Status::InvalidArgument("--dp: a step with its own loss runs on one pipeline replica, got dp " +
                                   std::to_string(impl_->dp_size));
  if (loss != nullptr && impl_->ContextParallel())
    return Status::InvalidArgument("--cp: a step's own loss (SDPO) with context parallelism is not supported yet");
  try {
    return impl_->TrainStep(tokens, seq_len, loss);
  } catch (const CommunicationError& e) {
    return Status::IoError("step " + std::to_string(impl_->step + 1) + ": " + e.what());
  } catch (const c10::Error& e) {
    return Status::Internal("step " + std::to_string(impl_->step + 1) + ": " + e.what_without_backtrace());
  }
}

Result<double> PipelineRank::EvalStep(const std::vector<std::int64_t>& tokens) {
  try {
    return impl_->EvalStep(tokens);
  } catch (const CommunicationError& e) {
    return Status::IoError(std::string("eval: ") + e.what());
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("eval: ") + e.what_without_backtrace());
  }
}

int PipelineRank::step() const { return impl_->step; }

void PipelineRank::SaveOptimizer(torch::serialize::OutputArchive& archive) const { impl_->optimizer->save(archive); }

Status PipelineRank::LoadOptimizer(torch::serialize::InputArchive& archive, int step) {
  try {
    impl_->optimizer->load(archive);
  } catch (const c10::Error& e) {
    return Status::InvalidArgument(std::string("the optimizer state does not fit this model: ") +
                                   e.what_without_backtrace());
  }
  impl_->step = step;
  return Status::Ok();
}

std::vector<int> PipelineRank::stages() const {
  std::vector<int> out;
  for (const auto& [s, m] : impl_->modules) out.push_back(s);
  return out;
}

PipelineStageModule& PipelineRank::stage_module(int s) { return *impl_->modules.at(s); }

}  // namespace kp::runtime
